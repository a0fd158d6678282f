package etcdlock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/stockguard/stockguard/internal/lock/etcdlock"
)

// A batch takes every free key in one transaction and reports the held ones,
// which the caller may then wait for one by one with Acquire.
func ExampleLocker_AcquireBatch() {
	l, err := etcdlock.New([]string{"127.0.0.1:2379", "127.0.0.1:2479", "127.0.0.1:2579"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close() // revokes the session: every lease still held is lost

	b, err := l.AcquireBatch(context.Background(), []string{"sku-1", "sku-2"})
	if err != nil {
		log.Fatal(err) // errors.Is(err, lock.ErrUnavailable) without a quorum
	}
	defer b.Leases.Release(context.Background())
	for _, lease := range b.Leases {
		fmt.Println(lease.Key(), "token (create revision of its key):", lease.Token())
	}
	fmt.Println("held elsewhere:", b.Held)
}

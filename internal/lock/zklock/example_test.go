package zklock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/stockguard/stockguard/internal/lock/zklock"
)

// A service instance makes one Locker and takes a lease per SKU; the token
// goes with every write, and the lease's context aborts the work if the
// session is lost meanwhile.
func Example() {
	l, err := zklock.New([]string{"127.0.0.1:2181", "127.0.0.1:2182", "127.0.0.1:2183"},
		zklock.WithSessionTimeout(4*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, "sku-42")
	if err != nil {
		log.Fatal(err) // wraps ctx.Err(), and lock.ErrUnavailable if the ensemble is down
	}
	defer lease.Release(context.Background())

	work, stop := lease.Context(ctx)
	defer stop()
	fmt.Println("write sku-42 fenced by token", lease.Token(), work.Err() == nil)
}

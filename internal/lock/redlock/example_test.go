package redlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/stockguard/stockguard/internal/lock/redlock"
)

// A service instance takes a per-SKU lease over the five masters and passes
// the lease's token to every write it makes under the lease; the store
// rejects writes with a token lower than the last one it saw.
func ExampleNew() {
	masters := []string{"127.0.0.1:6391", "127.0.0.1:6392", "127.0.0.1:6393", "127.0.0.1:6394", "127.0.0.1:6395"}
	l, err := redlock.New(masters, redlock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, "sku-1")
	if err != nil {
		log.Fatal(err) // wraps lock.ErrNotAcquired, lock.ErrUnavailable or ctx.Err()
	}
	defer lease.Release(context.Background())

	work, stop := lease.Context(ctx) // cancelled if the lease is lost
	defer stop()
	fmt.Println("write with fence token", lease.Token(), work.Err() == nil)
}

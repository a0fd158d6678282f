package lock_test

import (
	"context"
	"fmt"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/memlock"
)

// Lock every SKU of an order in sorted order, do the work on a context that
// ends if any lease is lost, and release with a context of its own.
func ExampleAcquireAll() {
	var locker lock.Locker = memlock.New()
	ctx := context.Background()
	set, err := lock.AcquireAll(ctx, locker, []string{"sku-b", "sku-a"})
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer set.Release(context.WithoutCancel(ctx))

	work, stop := set.Context(ctx)
	defer stop()
	for _, l := range set {
		// Pass l.Token() and l.ID() with every write; the store rejects older fences.
		fmt.Println(l.Key(), work.Err() == nil)
	}
	// Output:
	// sku-a true
	// sku-b true
}

package pglock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/stockguard/stockguard/internal/lock/pglock"
)

// The lease's token and id go with every write made under it; its context
// aborts the work once the lease is lost.
func ExampleNew() {
	ctx := context.Background()
	locker, err := pglock.New(ctx, "postgres://postgres@127.0.0.1:5433/stockguard?sslmode=disable",
		pglock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "SKU-42")
	if err != nil {
		log.Fatal(err)
	}
	work, cancel := lease.Context(ctx)
	// ... claim the SKU row with lease.Token() and lease.ID(), using work ...
	fmt.Println(work.Err() == nil, lease.Token() > 0)
	cancel()
	if err := lease.Release(ctx); err != nil {
		log.Print(err)
	}
}

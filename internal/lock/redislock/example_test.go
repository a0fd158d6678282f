package redislock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/redislock"
)

// TryOnce answers at once whether the key is free, instead of waiting.
func ExampleLocker_Acquire() {
	l, err := redislock.New("127.0.0.1:6391")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	lease, err := l.Acquire(context.Background(), "sku-1", lock.TryOnce())
	if err != nil {
		log.Fatal(err) // errors.Is(err, lock.ErrNotAcquired) when held
	}
	defer lease.Release(context.Background())
	fmt.Println("token from the key's INCR counter:", lease.Token())
}

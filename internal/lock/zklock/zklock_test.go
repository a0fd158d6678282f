package zklock

import (
	"testing"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
)

func TestConformance(t *testing.T) {
	servers := sharedZK(t)
	locktest.Run(t, locktest.Config{
		New:         func(tb testing.TB) lock.Locker { return mustLocker(tb, servers) },
		Exclusive:   true,
		FIFO:        true,
		Distributed: true,
		Lose: func(t *testing.T, l lock.Locker, _ *lock.Lease) {
			expireLocker(t, servers, l)
		},
	})
}

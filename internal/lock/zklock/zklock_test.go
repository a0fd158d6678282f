package zklock

import (
	"testing"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
)

func TestConformance(t *testing.T) {
	servers := sharedZK(t)
	e := newExpirer()
	locktest.Run(t, locktest.Config{
		New:         func(tb testing.TB) lock.Locker { return e.locker(tb, servers) },
		Exclusive:   true,
		Distributed: true,
		Lose: func(t *testing.T, l lock.Locker, _ *lock.Lease) {
			e.expire(t, l)
		},
	})
}

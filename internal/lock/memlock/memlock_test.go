package memlock_test

import (
	"testing"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/memlock"
)

func TestConformance(t *testing.T) {
	locktest.Run(t, locktest.Config{
		New:       func(testing.TB) lock.Locker { return memlock.New() },
		Exclusive: true,
	})
}

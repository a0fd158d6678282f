package nolock_test

import (
	"testing"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/nolock"
)

func TestConformance(t *testing.T) {
	locktest.Run(t, locktest.Config{New: func(testing.TB) lock.Locker { return nolock.New() }})
}

package local_test

import (
	"testing"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/local"
	"github.com/stockguard/stockguard/internal/lock/locktest"
)

func TestConformance(t *testing.T) {
	locktest.Run(t, locktest.Config{
		New:       func(testing.TB) lock.Locker { return local.New() },
		Exclusive: true,
	})
}

package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/local"
	"github.com/stockguard/stockguard/internal/lock/none"
)

// newLocker builds the configured backend.
func newLocker(ctx context.Context, c *config, reg prometheus.Registerer, log *slog.Logger) (lock.Locker, error) {
	switch c.lock {
	case "none":
		return none.New(), nil
	case "local":
		return local.New(), nil
	}
	return nil, fmt.Errorf("%w: lock backend %q is not wired yet", errUsage, c.lock)
}

// lockerWired reports whether newLocker can build the named backend.
func lockerWired(name string) bool {
	switch name {
	case "none", "local":
		return true
	}
	return false
}

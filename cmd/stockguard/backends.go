package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/cliflag"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/backends"
)

// newLocker builds the configured backend from the table.
func newLocker(ctx context.Context, c *config, reg prometheus.Registerer, log *slog.Logger) (lock.Locker, error) {
	b, err := backends.Lookup(c.lock)
	if err == nil {
		var l lock.Locker
		l, err = b.New(ctx, backends.Params{RedisAddrs: cliflag.SplitList(c.redisAddrs), ZKServers: cliflag.SplitList(c.zkServers),
			EtcdEndpoints: cliflag.SplitList(c.etcdEndpoints), DatabaseURL: c.databaseURL, TTL: c.lockTTL, Registerer: reg, Logger: log})
		if err == nil {
			return l, nil
		}
	}
	if errors.Is(err, backends.ErrConfig) {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil, err
}

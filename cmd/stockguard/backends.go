package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/local"
	"github.com/stockguard/stockguard/internal/lock/none"
	"github.com/stockguard/stockguard/internal/lock/pglock"
	"github.com/stockguard/stockguard/internal/lock/redis"
	"github.com/stockguard/stockguard/internal/lock/redlock"
	"github.com/stockguard/stockguard/internal/lock/zookeeper"
)

// newLocker builds the configured backend.
func newLocker(ctx context.Context, c *config, reg prometheus.Registerer, log *slog.Logger) (lock.Locker, error) {
	switch c.lock {
	case "none":
		return none.New(), nil
	case "local":
		return local.New(), nil
	case "postgres":
		return pglock.New(ctx, c.databaseURL, pglock.WithTTL(c.lockTTL), pglock.WithRegisterer(reg), pglock.WithLogger(log))
	case "redis":
		addrs := splitList(c.redisAddrs)
		if len(addrs) == 0 {
			return nil, fmt.Errorf("%w: --lock=redis needs --redis-addrs", errUsage)
		}
		return redis.New(addrs[0], redis.WithTTL(c.lockTTL), redis.WithRegisterer(reg), redis.WithLogger(log))
	case "redlock":
		addrs := splitList(c.redisAddrs)
		if len(addrs) < 3 {
			return nil, fmt.Errorf("%w: --lock=redlock needs at least 3 independent masters in --redis-addrs, got %d", errUsage, len(addrs))
		}
		return redlock.New(addrs, redlock.WithTTL(c.lockTTL), redlock.WithRegisterer(reg), redlock.WithLogger(log))
	case "zookeeper":
		servers := splitList(c.zkServers)
		if len(servers) == 0 {
			return nil, fmt.Errorf("%w: --lock=zookeeper needs --zk-servers", errUsage)
		}
		return zookeeper.New(servers, zookeeper.WithRegisterer(reg), zookeeper.WithLogger(log))
	}
	return nil, fmt.Errorf("%w: unknown lock backend %q", errUsage, c.lock)
}

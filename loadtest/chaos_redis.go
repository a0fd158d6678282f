package loadtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/stack"
)

// failoverRig is the redis-failover topology: a master, a replica that
// reaches the master through link (so its replication can be held back),
// and front, the one address the instances know, which moves from the
// master to the promoted replica as a Sentinel-aware client would.
type failoverRig struct {
	master, replica *stack.Redis
	link, front     *forwarder
}

// redisAdmin runs one admin command with a short-lived client, bounded by
// a few seconds: the servers are local and answer at once when up.
func redisAdmin(ctx context.Context, addr string, fn func(context.Context, *redis.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ContextTimeoutEnabled: true, PoolSize: 1, DisableIdentity: true})
	defer c.Close()
	return fn(ctx, c)
}

// waitReplicaLinked polls the replica until its replication link to the
// master is up, so that it holds the master's data before the run starts.
func waitReplicaLinked(ctx context.Context, addr string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		last = redisAdmin(ctx, addr, func(ctx context.Context, c *redis.Client) error {
			info, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "master_link_status:up") {
				return errors.New("replication link not up yet")
			}
			return nil
		})
		if last == nil {
			return nil
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return fmt.Errorf("replica %s: %w (%v)", addr, ctx.Err(), last)
}

// promote turns a replica into a master that keeps the data it has.
func promote(ctx context.Context, addr string) error {
	return redisAdmin(ctx, addr, func(ctx context.Context, c *redis.Client) error {
		return c.Do(ctx, "REPLICAOF", "NO", "ONE").Err()
	})
}

// fenceCounters reads the redis backend's per-SKU fence counters
// (stockguard:{sku}:fence, the INCR that issues tokens) on one server.
func fenceCounters(ctx context.Context, addr string, skus []string) (map[string]int64, error) {
	out := make(map[string]int64, len(skus))
	err := redisAdmin(ctx, addr, func(ctx context.Context, c *redis.Client) error {
		for _, s := range skus {
			v, err := c.Get(ctx, "stockguard:{"+s+"}:fence").Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			out[s] = v
		}
		return nil
	})
	return out, err
}

// formatCounters prints counters in SKU order, e.g. "s00000=812 s00001=790".
func formatCounters(skus []string, m map[string]int64) string {
	parts := make([]string, 0, len(skus))
	for _, s := range skus {
		parts = append(parts, fmt.Sprintf("%s=%d", shortSKU(s), m[s]))
	}
	return strings.Join(parts, " ")
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/stack"

	"github.com/stockguard/stockguard/loadtest/run"
)

// failoverRig is the redis-failover topology: a master, a replica that
// reaches the master through link (so its replication can be held back),
// and front, the one address the instances know, which moves from the
// master to the promoted replica as a Sentinel-aware client would.
type failoverRig struct {
	master, replica *stack.Redis
	link, front     *forwarder
}

// dialFunc opens a connection; nil means the host's own dialer.
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// redisAdmin runs one admin command with a short-lived client, bounded by
// a few seconds: the servers are local and answer at once when up. dial,
// when set, opens the client's connection (from the load tester's member
// in a namespaced run).
func redisAdmin(ctx context.Context, dial dialFunc, addr string, fn func(context.Context, *redis.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, Dialer: dial,
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
		last = redisAdmin(ctx, nil, addr, func(ctx context.Context, c *redis.Client) error {
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
		run.Sleep(ctx, 50*time.Millisecond)
	}
	return fmt.Errorf("replica %s: %w (%v)", addr, ctx.Err(), last)
}

// promote turns a replica into a master that keeps the data it has.
func promote(ctx context.Context, addr string) error {
	return redisAdmin(ctx, nil, addr, func(ctx context.Context, c *redis.Client) error {
		return c.Do(ctx, "REPLICAOF", "NO", "ONE").Err()
	})
}

// fenceCounters reads the redis backend's per-SKU fence counters
// (stockguard:{sku}:fence, the INCR that issues tokens) on one server.
func fenceCounters(ctx context.Context, addr string, skus []string) (map[string]int64, error) {
	out := make(map[string]int64, len(skus))
	err := redisAdmin(ctx, nil, addr, func(ctx context.Context, c *redis.Client) error {
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

func failoverSetup(ctx context.Context, e *chaosEnv) error {
	master, err := e.newRedis(ctx, "master")
	if err != nil {
		return err
	}
	link, err := e.newForwarder(master.Addr())
	if err != nil {
		return err
	}
	replica, err := e.newRedis(ctx, "replica", stack.RedisReplicaOf(link.Addr()))
	if err != nil {
		return err
	}
	front, err := e.newForwarder(master.Addr())
	if err != nil {
		return err
	}
	if err := waitReplicaLinked(ctx, replica.Addr(), 15*time.Second); err != nil {
		return err
	}
	e.failover = &failoverRig{master: master, replica: replica, link: link, front: front}
	e.opts.RedisAddrs = front.Addr()
	return nil
}

func redisFailover(ctx context.Context, e *chaosEnv) error {
	rig, v, skus := e.failover, e.victim(), e.load.skus
	e.event(EventFault, "replication link held: the replica stops receiving the master's writes (replication lag)")
	rig.link.Hold()
	// A lock key the replica got before the hold would still block the key
	// there after the promotion; once a TTL has passed it has expired, and
	// the replica knows of no lease that is still valid, which is the race.
	ttl := e.plan.sc.lockTTL(e.cc)
	run.Sleep(ctx, ttl+ttl/4)
	if _, err := e.stallVictim(ctx, failoverStall); err != nil {
		return err // no holder between claim and write: the failover would race nothing
	}
	onMaster, err := fenceCounters(ctx, rig.master.Addr(), skus)
	if err != nil {
		return err
	}
	from := e.event(EventFault, "SIGKILL the master (pid %d) while instance %d holds leases between claim and write; master's fence counters %s",
		rig.master.PID(), v+1, formatCounters(skus, onMaster))
	if err := rig.master.Kill(); err != nil {
		return err
	}
	_ = rig.link.Close() // what the replica never received is gone with the master
	if err := promote(ctx, rig.replica.Addr()); err != nil {
		return err
	}
	rig.front.Switch(rig.replica.Addr())
	onReplica, err := fenceCounters(ctx, rig.replica.Addr(), skus)
	if err != nil {
		return err
	}
	e.heal(nil, "replica promoted (REPLICAOF NO ONE), clients moved to it; it holds no lock keys and fence counters %s: tokens start again at or below the stalled holder's",
		formatCounters(skus, onReplica))
	e.window(from, from+failoverStall)
	return nil
}

package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock/redisnode"

	"github.com/stockguard/stockguard/loadtest/run"
)

// Figures of redis-clock-jump: the stalled holder's lease is still valid by
// its own clock when it writes (stall < TTL), so only the servers' jump can
// have let another client in.
const (
	clockJumpStall = 1200 * time.Millisecond
	clockJumpTTL   = 3 * time.Second
)

func clockJumpScenario() *scenario {
	return &scenario{
		Name: "redis-clock-jump", Backends: []string{"redis", "redlock"}, DamageUnfenced: true,
		Summary: "The lock servers' clock jumps forward under a held lock (emulated with PEXPIRE, as libfaketime hangs redis-server): the key expires on the single Redis, or on 3 of the 5 Redlock masters, while its holder sits between claim and write with a lease valid by its own clock; another instance acquires.",
		ttl:     func(cc Config) time.Duration { return max(cc.LockTTL, clockJumpTTL) },
		fault:   clockJump,
		check:   needStaleRejected,
	}
}

func clockJump(ctx context.Context, e *chaosEnv) error {
	nodes := e.redis
	if len(nodes) > 1 {
		nodes = nodes[:len(nodes)/2+1] // a majority: another client can now gather one
	}
	if _, err := e.stallVictim(ctx, clockJumpStall); err != nil {
		return err // no holder between claim and write: the jump would test nothing
	}
	var addrs []string
	for _, r := range nodes {
		addrs = append(addrs, r.Addr())
	}
	from := e.event(EventFault, "clock jump on %s: the stalled holder's lock keys expire now (PEXPIRE 1 ms), %v before their TTL", strings.Join(addrs, ", "), e.plan.sc.lockTTL(e.cc))
	jumped, err := expireLocks(ctx, nil, addrs, e.load.skus)
	if err != nil {
		return err
	}
	e.heal(nil, "%s; other instances may acquire while instance %d still believes in its lease", jumped, e.victim()+1)
	e.window(from, from+clockJumpStall)
	run.Sleep(ctx, clockJumpStall)
	return nil
}

// expireLocks shortens the lock key of every SKU to 1 ms on each server,
// as a clock jumping past the key's expiry would, and says what it found;
// dial opens the connections (nil: from the host).
func expireLocks(ctx context.Context, dial dialFunc, addrs, skus []string) (string, error) {
	var parts []string
	for _, addr := range addrs {
		for _, sku := range skus {
			var ttl time.Duration
			var found bool
			err := redisAdmin(ctx, dial, addr, func(ctx context.Context, c *redis.Client) error {
				var err error
				if ttl, err = c.PTTL(ctx, redisnode.LockKey(sku)).Result(); err != nil {
					return err
				}
				found, err = c.PExpire(ctx, redisnode.LockKey(sku), time.Millisecond).Result()
				return err
			})
			if err != nil {
				return "", fmt.Errorf("clock jump on %s: %w", addr, err)
			}
			if found {
				parts = append(parts, fmt.Sprintf("%s %s: %v left → expired", addr, shortSKU(sku), ttl.Round(time.Millisecond)))
			} else {
				parts = append(parts, fmt.Sprintf("%s %s: no key", addr, shortSKU(sku)))
			}
		}
	}
	return strings.Join(parts, "; "), nil
}

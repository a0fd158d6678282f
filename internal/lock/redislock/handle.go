package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// handle is a held lock; the lease calls it to release and to extend.
type handle struct {
	l   *Locker
	key string
	id  string
	ttl time.Duration
	// turn hands this Locker's turn on the key to its next waiter.
	turn func()
}

// Release deletes the lock if it is still ours. The caller's cancellation is
// ignored (the node timeout bounds the call): a release that never reaches
// the server leaves the key held for a whole TTL. A lock that is no longer
// ours (expired, taken by the next holder) is left alone and is no error.
func (h *handle) Release(ctx context.Context) error {
	// The next local waiter starts only once the key is gone, or its first
	// attempt would find it still held and sleep a retry delay.
	defer h.turn()
	if _, err := h.l.node.Release(context.WithoutCancel(ctx), h.key, h.id, true); err != nil {
		return fmt.Errorf("redis: release: %w", h.l.nodeErr(err))
	}
	return nil
}

// Extend resets the TTL if the lock is still ours. A lock found gone (or a
// closed Locker) is lost at once; while the server is unreachable it retries
// until ctx (the lease's validity deadline) ends, since the lease is still
// valid until then.
func (h *handle) Extend(ctx context.Context) (time.Time, error) {
	for {
		start := time.Now()
		err := h.l.node.Extend(ctx, h.key, h.id, h.ttl)
		if err == nil {
			h.l.m.Extended(true)
			return start.Add(h.ttl - retry.Drift(h.ttl)), nil
		}
		if errors.Is(err, redisnode.ErrNotHeld) || errors.Is(err, goredis.ErrClosed) {
			h.l.m.Extended(false)
			return time.Time{}, fmt.Errorf("redis: extend %q: %w: %w", h.key, lock.ErrLeaseLost, err)
		}
		if serr := retry.Sleep(ctx, retry.Jitter(h.l.cfg.retryDelay)); serr != nil {
			h.l.m.Extended(false)
			return time.Time{}, fmt.Errorf("redis: extend %q: %w: %w", h.key, lock.ErrUnavailable, h.l.nodeErr(err))
		}
	}
}

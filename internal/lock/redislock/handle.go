package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// handle is a held lock; the lease calls it to release and to extend.
type handle struct {
	l    *Locker
	hold redisnode.Hold
	ttl  time.Duration
	// turn hands this Locker's turn on the key to its next waiter; see handOn.
	turn   func()
	handed sync.Once
}

// handOn hands this Locker's turn on the key on, once, telling the loop
// whether the release woke a waiter elsewhere: a lost lease gets here from
// OnLost and again from a later Release, and an unheeded mark left by that
// second call, with no turn to spend it, would be taken for the next
// lease's release.
func (h *handle) handOn(woke bool) {
	h.handed.Do(func() {
		if !woke {
			h.l.loop.Unheeded(h.hold.Key)
		}
		h.turn()
	})
}

var _ lock.BatchHandle = (*handle)(nil)

// Release deletes the lock if it is still ours. The caller's cancellation is
// ignored (the node timeout bounds each try): a release that never reaches
// the server leaves the key held for a whole TTL, so one the server does
// not answer in its tries goes on in the background (redisnode.Release)
// and the error wraps lock.ErrCleanupPending. A lock that is no longer
// ours (expired, taken by the next holder) is left alone and is no error.
func (h *handle) Release(ctx context.Context) error {
	return h.l.release(ctx, []*handle{h})
}

// Releaser implements lock.BatchHandle: the Locker's handles are released
// together, in one script call.
func (h *handle) Releaser() lock.BatchReleaser { return h.l.rel }

// releaser releases many of one Locker's handles in one call.
type releaser struct{ l *Locker }

// ReleaseBatch implements lock.BatchReleaser.
func (r *releaser) ReleaseBatch(ctx context.Context, hs []lock.Handle) error {
	mine := make([]*handle, 0, len(hs))
	var errs []error
	for _, h := range hs {
		if rh, ok := h.(*handle); ok && rh.l == r.l {
			mine = append(mine, rh)
		} else if err := h.Release(ctx); err != nil { // not ours: cannot happen through Set.Release
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, r.l.release(ctx, mine))...)
}

// release deletes the locks of hs that are still theirs in one call, then
// hands each key's turn on, telling the loop which releases woke nobody.
// The next local waiter starts only once the key is gone, or its first
// attempt would find it still held and sleep a retry delay.
func (l *Locker) release(ctx context.Context, hs []*handle) error {
	holds := make([]redisnode.Hold, len(hs))
	var ttl time.Duration
	for i, h := range hs {
		holds[i] = h.hold
		ttl = max(ttl, h.ttl)
	}
	_, woke, err := l.node.Release(context.WithoutCancel(ctx), holds, wakeAll(len(holds)), nil, ttl)
	for i, h := range hs {
		h.handOn(err != nil || woke[i])
	}
	switch {
	case errors.Is(err, redisnode.ErrPending):
		return fmt.Errorf("redis: release %d key(s): %w: %w", len(hs), lock.ErrCleanupPending, l.nodeErr(err))
	case err != nil:
		return fmt.Errorf("redis: release %d key(s): %w", len(hs), l.nodeErr(err))
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
		err := h.l.node.Extend(ctx, h.hold.Key, h.hold.ID, h.ttl)
		if err == nil {
			h.l.m.Extended(true)
			return start.Add(h.ttl - retry.Drift(h.ttl)), nil
		}
		if errors.Is(err, redisnode.ErrNotHeld) || errors.Is(err, goredis.ErrClosed) {
			h.l.m.Extended(false)
			return time.Time{}, fmt.Errorf("redis: extend %q: %w: %w", h.hold.Key, lock.ErrLeaseLost, err)
		}
		if serr := retry.Sleep(ctx, retry.Jitter(h.l.cfg.retryDelay)); serr != nil {
			h.l.m.Extended(false)
			return time.Time{}, fmt.Errorf("redis: extend %q: %w: %w", h.hold.Key, lock.ErrUnavailable, h.l.nodeErr(err))
		}
	}
}

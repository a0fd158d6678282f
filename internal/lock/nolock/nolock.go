// Package nolock is the absence of a lock: every Acquire succeeds at once. It
// exists to show, with numbers, the lost updates and oversell that follow.
package nolock

import (
	"context"
	"fmt"

	"github.com/stockguard/stockguard/internal/lock"
)

// Locker grants every request.
type Locker struct{}

// New returns a Locker.
func New() Locker { return Locker{} }

// Name implements lock.Locker.
func (Locker) Name() string { return "none" }

// Fenced implements lock.Locker: none issues no tokens.
func (Locker) Fenced() bool { return false }

// Ping implements lock.Locker.
func (Locker) Ping(context.Context) error { return nil }

// Close implements lock.Locker.
func (Locker) Close() error { return nil }

// Acquire implements lock.Locker without excluding anyone.
func (Locker) Acquire(ctx context.Context, key string, _ ...lock.Option) (*lock.Lease, error) {
	if key == "" {
		return nil, fmt.Errorf("none: %w", lock.ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("none: acquire %q: %w", key, err)
	}
	lease, _ := lock.NewLease(lock.LeaseParams{Key: key, Handle: noop{}})
	return lease, nil
}

type noop struct{}

func (noop) Release(context.Context) error { return nil }

// AcquireBatch implements lock.Locker: every key is obtained.
func (l Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return lock.EachOnce(ctx, l, keys, opts...)
}

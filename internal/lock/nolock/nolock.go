// Package nolock is the absence of a lock: every Acquire succeeds at once. It
// exists to show, with numbers, the lost updates and oversell that follow.
package nolock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/stockguard/stockguard/internal/lock"
)

// errClosed is the cause of a lease lost to Close and of an Acquire after it.
var errClosed = errors.New("locker closed")

// Locker grants every request. It excludes no one, yet keeps track of the
// leases it granted so that Close can end them, as the contract says.
type Locker struct {
	mu     sync.Mutex
	live   map[*handle]func(error)
	closed bool
}

// New returns a Locker.
func New() *Locker { return &Locker{live: make(map[*handle]func(error))} }

// Name implements lock.Locker.
func (*Locker) Name() string { return "none" }

// Fenced implements lock.Locker: none issues no tokens.
func (*Locker) Fenced() bool { return false }

// Ping implements lock.Locker.
func (l *Locker) Ping(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("none: %w: %w", lock.ErrUnavailable, errClosed)
	}
	return nil
}

// Close implements lock.Locker: the leases still held are lost, and later
// Acquires fail with lock.ErrUnavailable.
func (l *Locker) Close() error {
	l.mu.Lock()
	live := l.live
	l.live, l.closed = nil, true
	l.mu.Unlock()
	for _, lose := range live {
		lose(fmt.Errorf("none: %w: %w", lock.ErrLeaseLost, errClosed))
	}
	return nil
}

// Acquire implements lock.Locker without excluding anyone.
func (l *Locker) Acquire(ctx context.Context, key string, _ ...lock.Option) (*lock.Lease, error) {
	if key == "" {
		return nil, fmt.Errorf("none: %w", lock.ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("none: acquire %q: %w", key, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("none: acquire %q: %w: %w", key, lock.ErrUnavailable, errClosed)
	}
	h := &handle{l: l}
	lease, lose := lock.NewLease(lock.LeaseParams{Key: key, Handle: h})
	l.live[h] = lose
	return lease, nil
}

type handle struct{ l *Locker }

func (h *handle) Release(context.Context) error {
	h.l.mu.Lock()
	delete(h.l.live, h)
	h.l.mu.Unlock()
	return nil
}

// AcquireBatch implements lock.Locker: every key is obtained.
func (l *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return lock.EachOnce(ctx, l, keys, opts...)
}

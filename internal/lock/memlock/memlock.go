// Package memlock is a per-key mutex inside one process. It is correct with a
// single service instance and oversells with several: it exists to show
// exactly that. It issues no fencing tokens.
package memlock

import (
	"context"
	"fmt"
	"sync"

	"github.com/stockguard/stockguard/internal/lock"
)

// Locker holds one channel-based mutex per key; a channel rather than
// sync.Mutex so that a waiter can give up when its context ends.
type Locker struct {
	mu    sync.Mutex
	slots map[string]*slot
}

type slot struct {
	ch   chan struct{} // holds one token while the key is locked
	refs int           // holders and waiters; the slot is dropped at zero
}

// New returns an empty Locker.
func New() *Locker { return &Locker{slots: make(map[string]*slot)} }

// Name implements lock.Locker.
func (l *Locker) Name() string { return "local" }

// Fenced implements lock.Locker: local issues no tokens.
func (l *Locker) Fenced() bool { return false }

// Ping implements lock.Locker; an in-process lock is always available.
func (l *Locker) Ping(context.Context) error { return nil }

// Close implements lock.Locker.
func (l *Locker) Close() error { return nil }

// Acquire implements lock.Locker.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	if key == "" {
		return nil, fmt.Errorf("local: %w", lock.ErrInvalidKey)
	}
	o := lock.Apply(0, opts)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: acquire %q: %w", key, err)
	}
	s := l.ref(key)
	select {
	case s.ch <- struct{}{}:
	default:
		if o.TryOnce {
			l.unref(key)
			return nil, fmt.Errorf("local: acquire %q: %w", key, lock.ErrNotAcquired)
		}
		select {
		case s.ch <- struct{}{}:
		case <-ctx.Done():
			l.unref(key)
			return nil, fmt.Errorf("local: acquire %q: %w", key, ctx.Err())
		}
	}
	lease, _ := lock.NewLease(lock.LeaseParams{Key: key, Handle: &handle{l: l, key: key, s: s}})
	return lease, nil
}

func (l *Locker) ref(key string) *slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.slots[key]
	if !ok {
		s = &slot{ch: make(chan struct{}, 1)}
		l.slots[key] = s
	}
	s.refs++
	return s
}

func (l *Locker) unref(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.slots[key]
	if s.refs--; s.refs == 0 {
		delete(l.slots, key)
	}
}

type handle struct {
	l   *Locker
	key string
	s   *slot
}

func (h *handle) Release(context.Context) error {
	<-h.s.ch
	h.l.unref(h.key)
	return nil
}

// AcquireBatch implements lock.Locker.
func (l *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return lock.EachOnce(ctx, l, keys, opts...)
}

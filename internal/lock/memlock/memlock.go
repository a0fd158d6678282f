// Package memlock is a per-key mutex inside one process. It is correct with a
// single service instance and oversells with several: it exists to show
// exactly that. It issues no fencing tokens.
package memlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/stockguard/stockguard/internal/lock"
)

// errClosed is the cause of a lease lost to Close and of an Acquire after it.
var errClosed = errors.New("locker closed")

// Locker holds one channel-based mutex per key; a channel rather than
// sync.Mutex so that a waiter can give up when its context ends.
type Locker struct {
	mu     sync.Mutex
	slots  map[string]*slot
	live   map[*handle]func(error) // held leases, lost on Close
	closed chan struct{}           // closed by Close: waiters give up
}

type slot struct {
	ch   chan struct{} // holds one token while the key is locked
	refs int           // holders and waiters; the slot is dropped at zero
}

// New returns an empty Locker.
func New() *Locker {
	return &Locker{slots: make(map[string]*slot), live: make(map[*handle]func(error)), closed: make(chan struct{})}
}

// Name implements lock.Locker.
func (l *Locker) Name() string { return "local" }

// Fenced implements lock.Locker: local issues no tokens.
func (l *Locker) Fenced() bool { return false }

// Ping implements lock.Locker; an in-process lock is available until Close.
func (l *Locker) Ping(context.Context) error {
	if l.isClosed() {
		return fmt.Errorf("local: %w: %w", lock.ErrUnavailable, errClosed)
	}
	return nil
}

func (l *Locker) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

// Close implements lock.Locker: the leases still held are lost, waiting
// Acquires give up, and later ones fail with lock.ErrUnavailable.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.isClosed() {
		l.mu.Unlock()
		return nil
	}
	close(l.closed)
	live := l.live
	l.live = nil
	l.mu.Unlock()
	for _, lose := range live {
		lose(fmt.Errorf("local: %w: %w", lock.ErrLeaseLost, errClosed))
	}
	return nil
}

// Acquire implements lock.Locker.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	if key == "" {
		return nil, fmt.Errorf("local: %w", lock.ErrInvalidKey)
	}
	o := lock.Apply(0, opts)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: acquire %q: %w", key, err)
	}
	if l.isClosed() {
		return nil, fmt.Errorf("local: acquire %q: %w: %w", key, lock.ErrUnavailable, errClosed)
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
		case <-l.closed:
			l.unref(key)
			return nil, fmt.Errorf("local: acquire %q: %w: %w", key, lock.ErrUnavailable, errClosed)
		}
	}
	h := &handle{l: l, key: key, s: s}
	lease, lose := lock.NewLease(lock.LeaseParams{Key: key, Handle: h})
	l.mu.Lock()
	shut := l.isClosed() // Close ran while this Acquire took the slot
	if !shut {
		l.live[h] = lose
	}
	l.mu.Unlock()
	if shut {
		_ = lease.Release(context.Background())
		return nil, fmt.Errorf("local: acquire %q: %w: %w", key, lock.ErrUnavailable, errClosed)
	}
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
	h.l.mu.Lock()
	delete(h.l.live, h)
	h.l.mu.Unlock()
	<-h.s.ch
	h.l.unref(h.key)
	return nil
}

// AcquireBatch implements lock.Locker.
func (l *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return lock.EachOnce(ctx, l, keys, opts...)
}

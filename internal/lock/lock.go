// Package lock is the contract every Stockguard lock backend meets.
//
// A Locker hands out Leases. A Lease is a promise with an expiry, not a
// guarantee: a process pause, a dead node or an expired session can end it
// at any moment, possibly before the holder notices. That is why every lease
// carries a fencing Token that the store checks on each write; the lock keeps
// contention low, the token keeps the data right.
package lock

import (
	"context"
	"time"
)

// Token is a fencing token: a number that strictly increases across
// successive leases of the same key within one backend. Each backend documents
// where its numbers come from (a Postgres sequence, a Redis counter, a quorum
// counter, a ZooKeeper czxid). Tokens of different backends are not comparable.
// Backends without a token source (none, local) return 0.
type Token uint64

// Locker acquires leases on keys. Implementations are safe for concurrent use.
type Locker interface {
	// Acquire blocks until it holds key, ctx is done, or (with TryOnce) the
	// first attempt fails. A cancelled Acquire returns an error wrapping
	// ctx.Err() and leaves nothing behind: no waiter node, no lock key
	// (unless the error wraps ErrCleanupPending: the servers did not answer
	// the clean-up in time, and it goes on in the background).
	Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error)
	// AcquireBatch tries once for every key, in one round per lock server
	// per phase, and returns a lease per key obtained and the keys held
	// elsewhere (a caller may wait for those in each key's own line, with
	// Acquire). It never waits for a held key. An error means the backend
	// failed (unreachable, no quorum, ctx done); nothing is then held, and
	// no lock, waiter node or key is left behind (unless the error wraps
	// ErrCleanupPending, as for Acquire). Duplicate keys count once.
	AcquireBatch(ctx context.Context, keys []string, opts ...Option) (Batch, error)
	// Name is the backend name used in flags, logs and metrics.
	Name() string
	// Fenced reports whether the backend issues meaningful tokens.
	Fenced() bool
	// Ping checks that the backend can currently grant locks (quorum reachable,
	// session connected); readiness probes call it.
	Ping(ctx context.Context) error
	// Close releases the backend's connections. Leases still held are lost:
	// their Done closes, at once or at the latest at their next extension
	// (their deadline, without a watchdog), and Err wraps ErrLeaseLost.
	Close() error
}

// Options tune one acquisition. Backends read them with Apply.
type Options struct {
	// TTL bounds how long a lease lives without extension on backends that
	// expire leases (redis, redlock). Zero means the backend's default.
	TTL time.Duration
	// TryOnce makes Acquire give up with ErrNotAcquired after one attempt.
	TryOnce bool
	// NoWatchdog disables the keepalive that extends a TTL lease at TTL/3.
	// Used to reproduce a holder that stops renewing (a GC pause).
	NoWatchdog bool
	// HoldWait bounds how long a multi-key AcquireAll holds some keys while
	// it waits for the rest (see AcquireAll). Default DefaultHoldWait.
	HoldWait time.Duration
}

// DefaultHoldWait is the hold-wait bound of AcquireAll when none is given.
const DefaultHoldWait = time.Second

// Option sets one field of Options.
type Option func(*Options)

// WithTTL sets the lease TTL. Default: the backend's configured TTL.
func WithTTL(d time.Duration) Option { return func(o *Options) { o.TTL = d } }

// TryOnce makes Acquire fail with ErrNotAcquired instead of waiting.
// Default: wait until ctx is done.
func TryOnce() Option { return func(o *Options) { o.TryOnce = true } }

// WithoutWatchdog disables the automatic extension: the lease expires at its
// TTL unless its holder calls Lease.Extend. Default: TTL leases are extended
// every TTL/3 until released (Redisson's watchdog).
func WithoutWatchdog() Option { return func(o *Options) { o.NoWatchdog = true } }

// WithHoldWait sets the hold-wait bound of a multi-key AcquireAll.
func WithHoldWait(d time.Duration) Option { return func(o *Options) { o.HoldWait = d } }

// Apply returns the options with defaults filled in.
func Apply(defaultTTL time.Duration, opts []Option) Options {
	o := Options{TTL: defaultTTL}
	for _, opt := range opts {
		opt(&o)
	}
	if o.TTL <= 0 {
		o.TTL = defaultTTL
	}
	if o.HoldWait <= 0 {
		o.HoldWait = DefaultHoldWait
	}
	return o
}

// Package etcdlock is the etcd lock backend: the recipe of etcd's
// concurrency.Mutex, written on the raw client so that one session can hold
// many keys at once and a batch of keys costs one transaction.
//
// A key's waiters are keys under Root/<key>/, each bound to the Locker's
// session lease. The waiter whose key has the lowest create revision holds
// the lock; every other waiter watches only the key just ahead of it (the
// highest create revision below its own), so a release wakes one waiter, not
// all. The fencing token is the holder key's create revision: the cluster's
// revision counts every write in one total order, across leader elections,
// and a key's waiters hold it in the order of their create revisions, so
// each holder of a key has a larger token than every earlier holder of that
// key (the contract's per-key order, which the store's fence checks).
// Across keys there is no such order: a waiter's token is fixed when it
// joins the line, so a later holder of one key may have a smaller token
// than an earlier holder of another.
//
// Every lease a Locker grants lives in its one session: an etcd lease that
// the Locker renews every TTL/3, each renewal a call of its own that may
// take TTL/4, so that a frozen member delays one renewal, not the session.
// The session is surely alive until the send time of its last answered
// renewal plus the TTL, less the drift allowance of the TTL backends; that
// is every lease's Deadline, and when it passes with no renewal answered the
// Locker gives the session up, before the cluster may expire it and hand
// its keys on. When the session ends that way, or its lease is revoked or
// found expired, its keys vanish with it, every lease on it is lost at once
// (Done closes, Err wraps lock.ErrLeaseLost), waiters in it queue again, and
// the Locker opens a new session for what comes next. One watch per session
// over Root hears every deletion of the session's keys that the Locker did
// not make itself: the lease revoked (its keys go at once, before the next
// renewal would tell) or a key deleted by an operator ends the lease at once
// (see entry).
//
// A failed or cancelled acquisition returns when its caller's context ends:
// a waiter put whose answer never came is not waited for but made harmless,
// by a tombstone its clean-up writes and the put's compare checks (see
// guardCmp), and the clean-up goes on in the background when the servers
// are slow to confirm it (lock.ErrCleanupPending).
package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
)

const backendName = "etcd"

var errClosed = errors.New("locker closed")

// maxSessionRetries bounds how often one acquisition starts over because the
// session it ran in ended; each retry runs in a freshly granted session, so
// more than a couple means the cluster keeps expiring leases.
const maxSessionRetries = 3

// Locker takes locks in one etcd cluster through one session, shared by
// every lease it grants (one Locker per service instance).
type Locker struct {
	cli *clientv3.Client
	// members carries the retries of calls no member answered in time.
	members *members
	cfg     config
	m       *metrics
	log     *slog.Logger

	// life is the sessions' keepalive context: it ends only with Close, never
	// with a caller's context.
	life     context.Context
	stopLife context.CancelFunc
	opening  chan struct{} // a one-slot semaphore: one session grant at a time

	mu     sync.Mutex
	cur    *session // nil until the first session, and after a session ended
	closed bool
	bg     sync.WaitGroup // clean-ups and revocations still running
	// drained is set once Close waits for bg: no new clean-up starts, the
	// revoked session took every key along.
	drained bool
}

var _ lock.Locker = (*Locker)(nil)

// New returns a Locker for the cluster at endpoints ("host:port"). It starts
// connecting and returns at once; the session is opened by the first
// Acquire, AcquireBatch or Ping, which fail with lock.ErrUnavailable while
// no quorum answers.
func New(endpoints []string, opts ...Option) (*Locker, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.reg)
	if err != nil {
		return nil, fmt.Errorf("etcd: metrics: %w", err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   append([]string(nil), endpoints...),
		DialTimeout: cfg.dialTimeout,
		// gRPC raises keepalive pings below 10 s to 10 s, so a frozen
		// member's connection is found dead only some 11 s on, past the
		// session TTL: the session's renewals do not wait for it (see
		// session.keepAlive), nor do watches (session.silence); other
		// requests are bounded by their contexts or attempts (attempt), and
		// retried on another member (members).
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: connect %s: %w: %w", strings.Join(endpoints, ","), lock.ErrUnavailable, err)
	}
	life, stop := context.WithCancel(context.Background())
	return &Locker{cli: cli, members: newMembers(cli, endpoints), cfg: cfg, m: m, log: cfg.log, life: life,
		stopLife: stop, opening: make(chan struct{}, 1)}, nil
}

// Name implements lock.Locker.
func (l *Locker) Name() string { return backendName }

// Fenced implements lock.Locker: tokens are create revisions.
func (l *Locker) Fenced() bool { return true }

// Ping implements lock.Locker: it fails unless the Locker has a live session
// (opening one if needed) and a linearizable read, which needs the leader
// and a quorum, answers within 2 s.
func (l *Locker) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := l.session(ctx); err != nil {
		return fmt.Errorf("etcd: ping: %w", err)
	}
	if _, err := l.cli.Get(ctx, Root, clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd: ping: %w: %w", lock.ErrUnavailable, err)
	}
	return nil
}

// Close implements lock.Locker. It revokes the session's lease, which
// deletes every key the Locker holds or waits with; every lease still held
// is lost.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	s := l.cur
	l.mu.Unlock()
	if s != nil {
		l.giveUp(s, errClosed)
	}
	l.mu.Lock()
	l.drained = true
	l.mu.Unlock()
	l.bg.Wait()
	l.stopLife()
	return errors.Join(l.members.close(), l.cli.Close())
}

// Acquire implements lock.Locker. Options other than TryOnce do not apply: a
// lease has no TTL of its own, it lasts as long as the session, whose
// renewals extend every lease (its Deadline) whatever WithoutWatchdog says.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	start := time.Now()
	lease, err := l.acquire(ctx, key, lock.Apply(0, opts))
	if err != nil {
		l.m.Failed(lockmetrics.Reason(err))
		return nil, fmt.Errorf("etcd: acquire %q: %w", clip(key), err)
	}
	l.m.Acquired(time.Since(start))
	return lease, nil
}

func (l *Locker) acquire(ctx context.Context, key string, o lock.Options) (*lock.Lease, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	var err error
	for range maxSessionRetries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var s *session
		if s, err = l.session(ctx); err != nil {
			return nil, err
		}
		l.m.Attempt()
		var lease *lock.Lease
		lease, err = s.acquire(ctx, key, o)
		switch {
		case err == nil:
			return lease, nil
		case startOver(err):
			continue // our key died with the session (queue again in the next one) or was deleted
		}
		return nil, l.explain(ctx, err)
	}
	return nil, fmt.Errorf("%w: %d sessions ended during one acquisition: %w", lock.ErrUnavailable, maxSessionRetries, err)
}

// explain turns an attempt's error into what callers can act on: the key is
// held, the caller's context ended, or the cluster cannot grant locks now.
func (l *Locker) explain(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, lock.ErrNotAcquired), errors.Is(err, lock.ErrUnavailable):
		return err
	case ctx.Err() != nil:
		if !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return err
	default:
		return fmt.Errorf("%w: %w", lock.ErrUnavailable, err)
	}
}

// AcquireBatch implements lock.Locker: one transaction for the whole batch
// (per batchKeys keys, 127, within etcd's default --max-txn-ops), see
// session.batch.
func (l *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	start := time.Now()
	sorted, err := lock.BatchKeys(keys)
	if err == nil {
		for _, k := range sorted {
			if err = checkKey(k); err != nil {
				break
			}
		}
	}
	if err != nil {
		return lock.Batch{}, fmt.Errorf("etcd: batch: %w", err)
	}
	if len(sorted) == 0 {
		return lock.Batch{}, nil
	}
	for range maxSessionRetries {
		if err = ctx.Err(); err != nil {
			break
		}
		var s *session
		if s, err = l.session(ctx); err != nil {
			break
		}
		l.m.Attempt()
		var b lock.Batch
		b, err = s.batch(ctx, sorted)
		if err == nil {
			d := time.Since(start)
			for range b.Leases {
				l.m.Acquired(d)
			}
			return b, nil
		}
		if !startOver(err) {
			err = l.explain(ctx, err)
			break
		}
	}
	if startOver(err) {
		err = fmt.Errorf("%w: %d sessions ended during one batch: %w", lock.ErrUnavailable, maxSessionRetries, err)
	}
	l.m.Failed(lockmetrics.Reason(err))
	return lock.Batch{}, fmt.Errorf("etcd: batch of %d keys: %w", len(sorted), err)
}

// maxKeyLen bounds a key so that every request stays far below what the
// servers take (--max-request-bytes, 1.5 MiB by default; past it they refuse
// the request, and past 2 MiB gRPC does): a batch transaction carries up to
// batchKeys keys, each about three times (the range compare's key and end,
// the waiter key), so 127 keys of 1 KiB make some 400 KiB. SKUs are at most
// 64 bytes; zklock allows 200.
const maxKeyLen = 1024

// checkKey rejects keys that would not name one prefix of their own (with a
// slash, key "a" would count the waiters of "a/b" as its own) and keys
// longer than maxKeyLen.
func checkKey(key string) error {
	switch {
	case len(key) > maxKeyLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", lock.ErrInvalidKey, len(key), maxKeyLen)
	case key == "" || strings.ContainsRune(key, '/'):
		return fmt.Errorf("%w: %q (empty or contains '/')", lock.ErrInvalidKey, key)
	}
	return nil
}

// clip shortens a key for an error message: one refused as too long may be
// of any length.
func clip(key string) string {
	if len(key) <= maxKeyLen {
		return key
	}
	return fmt.Sprintf("%.64s… (%d bytes)", key, len(key))
}

// prefix is the directory of key's waiters; the trailing slash keeps key
// "a" from matching the waiters of "ab".
func prefix(key string) string { return Root + "/" + key + "/" }

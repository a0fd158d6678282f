package pglock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
)

var _ lock.MultiAcquirer = (*Locker)(nil)

// errHoldWait means a multi-key wait passed the hold-wait bound while the
// caller still waits: what it took is freed and it queues again.
var errHoldWait = errors.New("held keys past the hold-wait bound while waiting for the rest")

// AcquireAll implements lock.MultiAcquirer: every key on one connection,
// locked in key order (the first key by one statement, the rest and their
// tokens by another), so a multi-key operation needs one connection however
// many keys it has. The wait for the first key, holding nothing, lasts as
// long as ctx allows. Once it holds the first key it keeps what it holds
// at most the hold-wait bound (lock.WithHoldWait) at a time while it waits
// for the rest: then it frees them for their other waiters and queues again
// for its first key. With TryOnce it is all or nothing, in one statement.
func (l *Locker) AcquireAll(ctx context.Context, keys []string, opts ...lock.Option) (lock.Set, error) {
	sorted, err := checkKeys(keys)
	if err != nil {
		return nil, err
	}
	switch len(sorted) {
	case 0:
		return lock.Set{}, nil
	case 1:
		lease, err := l.Acquire(ctx, sorted[0], opts...)
		if err != nil {
			return nil, err
		}
		return lock.Set{lease}, nil
	}
	start := time.Now()
	o := lock.Apply(l.ttl, opts)
	var set lock.Set
	if o.TryOnce {
		var b lock.Batch
		if b, err = l.tryAll(ctx, sorted, o, true); err == nil {
			set = b.Leases
		}
	} else {
		set, err = l.waitAll(ctx, sorted, o)
	}
	if err != nil {
		l.m.Failed(lockmetrics.Reason(err))
		return nil, fmt.Errorf("pglock: acquire %d keys: %w", len(sorted), err)
	}
	for range set {
		l.m.Acquired(time.Since(start))
	}
	return set, nil
}

// AcquireBatch implements lock.Locker: pg_try_advisory_lock for every key
// in one statement on one connection, each obtained key's token drawn in
// the same statement right after its lock. Keys held elsewhere are only
// reported: they were never locked. The obtained keys' leases share the
// connection, which returns to the pool with the last of them.
func (l *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	sorted, err := checkKeys(keys)
	if err != nil {
		return lock.Batch{}, err
	}
	if len(sorted) == 0 {
		return lock.Batch{}, nil
	}
	start := time.Now()
	b, err := l.tryAll(ctx, sorted, lock.Apply(l.ttl, opts), false)
	if err != nil {
		l.m.Failed(lockmetrics.Reason(err))
		return lock.Batch{}, fmt.Errorf("pglock: batch of %d keys: %w", len(sorted), err)
	}
	for range b.Leases {
		l.m.Acquired(time.Since(start))
	}
	for range b.Held {
		l.m.Failed(lockmetrics.ReasonNotAcquired)
	}
	return b, nil
}

// checkKeys sorts keys, drops duplicates and checks each as Acquire does.
func checkKeys(keys []string) ([]string, error) {
	sorted, err := lock.BatchKeys(keys)
	if err != nil {
		return nil, fmt.Errorf("pglock: %w", err)
	}
	for _, k := range sorted {
		if !utf8.ValidString(k) || strings.IndexByte(k, 0) >= 0 {
			return nil, fmt.Errorf("pglock: %q: %w", k, lock.ErrInvalidKey)
		}
	}
	return sorted, nil
}

// tryAll tries every key once, in one statement. With all, anything short
// of every key is ErrNotAcquired and nothing is kept.
func (l *Locker) tryAll(parent context.Context, keys []string, o lock.Options, all bool) (lock.Batch, error) {
	if err := parent.Err(); err != nil {
		return lock.Batch{}, err
	}
	ctx, stop := l.bind(parent)
	defer stop()
	ids := newIDs(len(keys))
	var b lock.Batch
	err := l.withConn(ctx, parent, func(c *pgxpool.Conn) error {
		sent := time.Now()
		var tokens []*int64
		pb := &pgx.Batch{}
		pb.Queue(settingsSQL, leaseAppName(ids[0]), idleTimeout(o.TTL))
		pb.Queue(tryAllSQL, keys).QueryRow(func(row pgx.Row) error { return row.Scan(&tokens) })
		if err := l.send(ctx, c, pb, fmt.Sprintf("try of %d keys from %q", len(keys), keys[0])); err != nil {
			return err
		}
		if len(tokens) != len(keys) {
			return fmt.Errorf("%d tokens for %d keys", len(tokens), len(keys))
		}
		var got []string
		var gotIDs []uuid.UUID
		var gotTokens []int64
		for i, t := range tokens {
			if t == nil {
				b.Held = append(b.Held, keys[i])
				continue
			}
			got, gotIDs, gotTokens = append(got, keys[i]), append(gotIDs, ids[i]), append(gotTokens, *t)
		}
		if len(got) == 0 || (all && len(b.Held) > 0) {
			if err := l.exec(ctx, c, keys[0], unlockAllSQL, poolAppName); err != nil {
				return err
			}
			c.Release()
			if all {
				return lock.ErrNotAcquired
			}
			return nil
		}
		set, err := l.grant(c, got, gotIDs, gotTokens, sent, o)
		if err != nil {
			return err
		}
		b.Leases = set
		return nil
	})
	if err != nil {
		return lock.Batch{}, err
	}
	return b, nil
}

// waitAll locks every key in key order on one connection. A first pipeline
// labels the session and waits for the first key, holding nothing, as long
// as ctx allows, so the acquisition keeps its place in that key's line; a
// second waits for the other keys in turn, within the hold-wait bound, and
// draws the tokens. Two round trips, not one: the server sends a
// pipeline's results only at its end, so one pipeline could not tell us
// when the first key was granted and the bound should start.
func (l *Locker) waitAll(parent context.Context, keys []string, o lock.Options) (lock.Set, error) {
	if err := parent.Err(); err != nil {
		return nil, err
	}
	ctx, stop := l.bind(parent)
	defer stop()
	ids := newIDs(len(keys))
	var set lock.Set
	err := l.withConn(ctx, parent, func(c *pgxpool.Conn) error {
		sent := time.Now()
		first := &pgx.Batch{}
		first.Queue(settingsSQL, leaseAppName(ids[0]), idleTimeout(o.TTL))
		first.Queue(lockAllSQL, keys[:1])
		if err := l.send(ctx, c, first, keys[0]); err != nil {
			return err
		}
		var tokens []int64
		rest := &pgx.Batch{}
		rest.Queue(lockAllSQL, keys[1:])
		rest.Queue(nextvalAllSQL, len(keys)).QueryRow(func(row pgx.Row) error { return row.Scan(&tokens) })
		hctx, cancel := context.WithTimeout(ctx, o.HoldWait)
		err := l.send(hctx, c, rest, fmt.Sprintf("%d keys after %q", len(keys)-1, keys[0]))
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && hctx.Err() != nil:
			return errHoldWait
		case err != nil:
			return err
		case len(tokens) != len(keys):
			return fmt.Errorf("%d tokens for %d keys", len(tokens), len(keys))
		}
		if time.Since(sent) > o.TTL/refreshAfter {
			// A long wait ate into the validity counted from before it.
			sent = time.Now()
			if err := l.exec(ctx, c, keys[0], keepaliveSQL); err != nil {
				return err
			}
		}
		set, err = l.grant(c, keys, ids, tokens, sent, o)
		return err
	})
	return set, err
}

// withConn runs attempt on a pooled connection. attempt owns the
// connection when it succeeds (it keeps it for its leases or hands it
// back); when it fails, withConn discards it, which frees whatever it took
// or was about to be granted. A connection found dead (after a server
// restart every idle pooled connection is) is replaced, up to maxDeadConns
// times; a wait past the hold-wait bound starts over, in line again for
// the first key.
func (l *Locker) withConn(ctx, parent context.Context, attempt func(*pgxpool.Conn) error) error {
	for dead := 0; ; {
		c, err := l.pool.Acquire(ctx)
		if err != nil {
			return l.failure(parent, err)
		}
		err = attempt(c)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, lock.ErrNotAcquired):
			return err // attempt handed the connection back
		case errors.Is(err, errHoldWait):
			if derr := l.discard(c); derr != nil {
				return l.failure(parent, fmt.Errorf("%w (%w)", err, derr))
			}
			l.log.Debug("multi-key wait gave up its keys past the hold-wait bound; queueing again")
			continue
		}
		closed := c.Conn().IsClosed()
		err = l.discarding(c, err)
		if dead++; !closed || dead >= maxDeadConns || ctx.Err() != nil {
			return l.failure(parent, err)
		}
		l.log.Debug("dropped a dead pooled connection", "err", err)
	}
}

func newIDs(n int) []uuid.UUID {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
	}
	return ids
}

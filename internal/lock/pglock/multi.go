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

// AcquireAll implements lock.MultiAcquirer with the contract of
// lock.AcquireAll, every key on one connection (the first key by one
// statement, the rest and their tokens by another when none is held
// elsewhere), so a multi-key operation needs one connection however many
// keys it has. The wait for a key while it holds nothing lasts as long as
// ctx allows; it holds keys while it waits at most the hold-wait bound
// (lock.WithHoldWait), then frees them and waits on for the key it waited
// for, holding nothing (see waitAll). With TryOnce it is all or nothing, in
// one statement.
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

// waitAll locks every key on one connection as lock.AcquireAll does on
// any Locker: it waits for the first key holding nothing, as long as ctx
// allows, then tries the rest in one statement; a later key found held it
// waits for holding only smaller keys, within the hold-wait bound. Past the
// bound it frees every key and waits for that one holding nothing, as long
// as ctx allows; once it has it, it tries each smaller key once (one found
// held is the next it frees everything for and waits for) and takes the
// larger ones as before. Uncontended, that is two round trips.
//
// One session, not one more per contended key: a backend queued for a lock runs nothing else, so it frees its keys by leaving the line, rejoins it in the same pipeline, and never leaves it again.
func (l *Locker) waitAll(parent context.Context, keys []string, o lock.Options) (lock.Set, error) {
	if err := parent.Err(); err != nil {
		return nil, err
	}
	ctx, stop := l.bind(parent)
	defer stop()
	ids := newIDs(len(keys))
	var set lock.Set
	err := l.withConn(ctx, parent, func(c *pgxpool.Conn) error {
		w := &multiWait{l: l, c: c, keys: keys, tokens: make([]int64, len(keys))}
		if err := w.run(ctx, leaseAppName(ids[0]), o); err != nil {
			return err
		}
		sent := w.sent
		if time.Since(sent) > o.TTL/refreshAfter {
			// A long wait ate into the validity counted from before it.
			sent = time.Now()
			if err := l.exec(ctx, c, keys[0], keepaliveSQL); err != nil {
				return err
			}
		}
		var err error
		set, err = l.grant(c, keys, ids, w.tokens, sent, o)
		return err
	})
	return set, err
}

// multiWait is one waiting AcquireAll on its connection.
type multiWait struct {
	l      *Locker
	c      *pgxpool.Conn
	keys   []string // sorted, unique, at least two
	tokens []int64  // each key's token, drawn after its lock was last granted
	sent   time.Time
}

// run takes every key, holding keys while it waits at most o.HoldWait at a
// time, and leaves them all held on w.c.
func (w *multiWait) run(ctx context.Context, appName string, o lock.Options) error {
	at, err := 0, w.wait(ctx, ctx, 0, settingsSQL, appName, idleTimeout(o.TTL))
	for {
		if err != nil {
			return err
		}
		// Smaller keys, each tried once: waiting for one now would be
		// waiting out of order, holding keys[at].
		if at > 0 {
			var miss int
			if miss, err = w.try(ctx, 0, at); err != nil {
				return err
			}
			if miss >= 0 {
				at, err = miss, w.wait(ctx, ctx, miss, unlockEverySQL)
				continue
			}
		}
		var past bool
		if past, at, err = w.rest(ctx, at+1, o.HoldWait); err != nil || !past {
			return err
		}
		err = w.wait(ctx, ctx, at, unlockEverySQL)
	}
}

// rest takes keys[from:], holding every key before from: each tried once,
// and one found held waited for within what is left of bound. When the
// bound passes it returns past and the index of the key it waited for; it
// still holds what it held, and no longer waits. Ending that wait takes the
// server's answer to its cancel, which it waits for while ctx lasts (see
// sendWithin): a network hiccup at the bound does not fail the acquisition.
func (w *multiWait) rest(ctx context.Context, from int, bound time.Duration) (past bool, at int, err error) {
	for from < len(w.keys) {
		var miss int
		if miss, err = w.try(ctx, from, len(w.keys)); err != nil || miss < 0 {
			return false, 0, err
		}
		// Keys after miss that the try obtained would be held out of
		// order while waiting for it: they go in the same pipeline.
		var after []string
		for i := miss + 1; i < len(w.keys); i++ {
			if w.tokens[i] != 0 {
				after = append(after, w.keys[i])
			}
		}
		if bound <= 0 {
			return true, miss, nil
		}
		start := time.Now()
		hctx, cancel := context.WithTimeout(ctx, bound)
		err = w.wait(ctx, hctx, miss, unlockKeysSQL, after)
		boundPassed := hctx.Err() != nil // read before cancel, which would end it anyway
		cancel()
		bound -= time.Since(start)
		switch {
		case err == nil:
			from = miss + 1
		case ctx.Err() == nil && boundPassed && !abandoned(err) && !w.c.Conn().IsClosed():
			return true, miss, nil
		default:
			return false, 0, err
		}
	}
	return false, 0, nil
}

// try tries keys[lo:hi] once, in one statement, and returns the first one
// held elsewhere, or -1. The keys it obtained stay held, with their tokens.
func (w *multiWait) try(ctx context.Context, lo, hi int) (int, error) {
	var tokens []*int64
	b := &pgx.Batch{}
	b.Queue(tryAllSQL, w.keys[lo:hi]).QueryRow(func(row pgx.Row) error { return row.Scan(&tokens) })
	if err := w.send(ctx, ctx, b, fmt.Sprintf("try of %d keys from %q", hi-lo, w.keys[lo])); err != nil {
		return 0, err
	}
	if len(tokens) != hi-lo {
		return 0, fmt.Errorf("%d tokens for %d keys", len(tokens), hi-lo)
	}
	miss := -1
	for i, t := range tokens {
		w.tokens[lo+i] = 0
		if t != nil {
			w.tokens[lo+i] = *t
		} else if miss < 0 {
			miss = lo + i
		}
	}
	return miss, nil
}

// wait waits for keys[i] after the statement before (with args) in the same
// pipeline, which frees keys or labels the session, so that the wait joins
// the key's line the moment the keys are free. The wait ends with bound, a
// child of ctx, as sendWithin's.
func (w *multiWait) wait(ctx, bound context.Context, i int, before string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(before, args...)
	b.Queue(lockAllSQL, w.keys[i:i+1])
	b.Queue(nextvalSQL).QueryRow(func(row pgx.Row) error { return row.Scan(&w.tokens[i]) })
	if before == unlockEverySQL {
		clear(w.tokens)
	}
	return w.send(ctx, bound, b, w.keys[i])
}

// send runs a pipeline of the wait, within bound as sendWithin does, and
// notes when it was sent: the server's idle timer of the granted leases
// starts no earlier.
func (w *multiWait) send(ctx, bound context.Context, b *pgx.Batch, what string) error {
	w.sent = time.Now()
	return w.l.sendWithin(ctx, bound, w.c, b, what)
}

// withConn runs attempt on a pooled connection. attempt owns the
// connection when it succeeds (it keeps it for its leases or hands it
// back); when it fails, withConn discards it, which frees whatever it took
// or was about to be granted. A connection found dead (after a server
// restart every idle pooled connection is) is replaced, up to maxDeadConns
// times. One that send gave up, its cancel unanswered, is not dead: its
// session may still hold keys this attempt took, and a retry would queue
// behind them and hide lock.ErrCleanupPending.
func (l *Locker) withConn(ctx, parent context.Context, attempt func(*pgxpool.Conn) error) error {
	for deaths := 0; ; {
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
		}
		dead := !abandoned(err) && c.Conn().IsClosed()
		err = l.discarding(c, err)
		if deaths++; !dead || deaths >= maxDeadConns || ctx.Err() != nil {
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

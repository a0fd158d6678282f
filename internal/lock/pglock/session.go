package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/internal/lock"
)

// session is one dedicated lock connection and the leases whose locks it
// holds: one for a lone Acquire, every key of a batch or of a multi-key
// AcquireAll. Each lease releases its own key; the connection goes back to
// the pool with the last. The session lives and dies as one: when it ends
// (a failed keepalive or unlock, a lost lease, Close), every lease on it is
// lost, since the server freed all its locks at once.
type session struct {
	l   *Locker
	ttl time.Duration

	mu     sync.Mutex // serialises every use of conn
	conn   *pgxpool.Conn
	leases map[*handle]struct{}
	alive  time.Time // when the last statement that restarted the idle timer was sent
	// unwatch stops the read that watches conn between statements (see
	// watch) and waits for it; nil while none runs.
	unwatch func()
}

// handle is one lease's hold: its key's lock on its session.
type handle struct {
	s    *session
	key  string
	lose func(error) // set before the handle is shared
}

var _ lock.Extender = (*handle)(nil)

// grant wraps the locks just taken on c (one per key, tokens in key order)
// in a session and its leases. sent is when the statements that took them
// were sent: the server's idle timer started no earlier. On error the
// caller still owns c and must end it: it holds the locks.
func (l *Locker) grant(c *pgxpool.Conn, keys []string, ids []uuid.UUID, tokens []int64, sent time.Time, o lock.Options) (lock.Set, error) {
	s := &session{l: l, ttl: o.TTL, conn: c, alive: sent, leases: make(map[*handle]struct{}, len(keys))}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	set := make(lock.Set, len(keys))
	for i, key := range keys {
		h := &handle{s: s, key: key}
		lease, lose := lock.NewLease(lock.LeaseParams{
			Key:      key,
			Token:    lock.Token(tokens[i]),
			ID:       ids[i],
			Deadline: validUntil(sent, o.TTL),
			TTL:      o.TTL,
			Watchdog: !o.NoWatchdog,
			Handle:   h,
			OnLost:   h.onLost,
		})
		h.lose = lose
		s.leases[h] = struct{}{}
		set[i] = lease
	}
	l.live[s] = struct{}{}
	s.watch()
	return set, nil
}

// watch reads s's connection while no statement runs, so that the server
// ending the session (pg_terminate_backend, a shutdown or crash, its idle
// timeout) loses the leases at once rather than at the next keepalive, up
// to TTL/3 later, while their deadlines still look valid. An idle session
// that never LISTENs is sent nothing else: the read ends only with the
// session (a FATAL error or EOF) or when a statement needs the connection
// (stopWatch), and a cancelled read leaves the connection usable (pgx sets
// a socket deadline, then clears it). The caller holds s.mu.
func (s *session) watch() {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	pg := s.conn.Conn().PgConn()
	s.unwatch = func() {
		stop()
		<-done
	}
	go func() {
		err := pg.WaitForNotification(ctx)
		for err == nil {
			err = pg.WaitForNotification(ctx)
		}
		close(done) // before end, which stops the watch under s.mu
		if ctx.Err() == nil {
			s.end(fmt.Errorf("%w: the server ended the session: %w", lock.ErrLeaseLost, err))
		}
	}()
}

// stopWatch stops the watch, if one runs, before a statement or the end of
// the session. The caller holds s.mu.
func (s *session) stopWatch() {
	if s.unwatch != nil {
		s.unwatch()
		s.unwatch = nil
	}
}

// Extend restarts the server's idle timer, which keeps every lock of the
// session. Leases of one batch extend at about the same moment: a keepalive
// sent less than TTL/refreshAfter ago serves them all. The new deadline is
// counted from before the statement was sent, so it comes before the moment
// the server would end the session.
//
// The statement runs to its end, bounded by ctx's deadline but deaf to its
// cancellation: a release cancels its lease's keepalive, and a statement
// cancelled in flight makes pgx close the connection, which ends the
// session and frees every lock on it, the other leases' too. The release
// waits for the keepalive instead (a round trip). Close still ends it.
func (h *handle) Extend(ctx context.Context) (time.Time, error) {
	s := h.s
	ectx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ectx, cancel = context.WithDeadline(ectx, d)
		defer cancel()
	}
	ctx, stop := s.l.bind(ectx)
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return time.Time{}, fmt.Errorf("pglock: %w: connection already closed", lock.ErrLeaseLost)
	}
	if time.Since(s.alive) < s.ttl/refreshAfter {
		return validUntil(s.alive, s.ttl), nil
	}
	s.stopWatch()
	sent := time.Now()
	if _, err := s.conn.Exec(ctx, keepaliveSQL); err != nil {
		// Whatever the cause, the session can no longer be shown alive before
		// the deadline; the lease ends and onLost ends the session.
		return time.Time{}, fmt.Errorf("pglock: %w: keepalive: %w", lock.ErrLeaseLost, err)
	}
	s.alive = sent
	s.watch()
	return validUntil(sent, s.ttl), nil
}

// Release unlocks the lease's key; the last lease of the session also
// undoes the lease settings and hands the connection back to the pool.
// When anything is off, the session is ended instead, which frees its locks
// too (and loses the other leases on it).
func (h *handle) Release(ctx context.Context) error { return h.s.unlock(ctx, []*handle{h}) }

// Releaser implements lock.BatchHandle: the leases of one session that a
// lock.Set releases together (a batch's, a multi-line order's) are unlocked
// in one statement, not one round trip each.
func (h *handle) Releaser() lock.BatchReleaser { return h.s }

// ReleaseBatch implements lock.BatchReleaser, as Release does each.
func (s *session) ReleaseBatch(ctx context.Context, hs []lock.Handle) error {
	mine := make([]*handle, len(hs))
	for i, lh := range hs {
		mine[i] = lh.(*handle) // lock.Set groups by Releaser: ours
	}
	return s.unlock(ctx, mine)
}

// unlock releases hs, leases of s, in one statement.
func (s *session) unlock(ctx context.Context, hs []*handle) error {
	s.mu.Lock()
	if s.conn == nil {
		s.mu.Unlock()
		return nil // lost, and the session already ended
	}
	keys := make([]string, 0, len(hs))
	for _, h := range hs {
		if _, ok := s.leases[h]; ok {
			delete(s.leases, h)
			keys = append(keys, h.key)
		}
	}
	if len(keys) == 0 {
		s.mu.Unlock()
		return nil // released already
	}
	s.stopWatch()
	c, last := s.conn, len(s.leases) == 0
	var unlocked bool
	var err error
	if last {
		err = c.QueryRow(ctx, unlockSQL, keys, poolAppName).Scan(&unlocked, nil, nil)
	} else {
		err = c.QueryRow(ctx, unlockKeysSQL, keys).Scan(&unlocked)
	}
	if err == nil && unlocked {
		if last {
			s.conn = nil
		} else {
			s.watch()
		}
		s.mu.Unlock()
		if last {
			s.l.forget(s)
			c.Release()
		}
		return nil
	}
	s.mu.Unlock()
	if err == nil {
		// Cannot happen while the session lives; do not reuse a session in a
		// state we do not understand.
		err = errors.New("the session no longer held every lock")
	}
	s.end(fmt.Errorf("%w: unlock of %q on the same session failed: %w", lock.ErrLeaseLost, keys, err))
	if ctx.Err() != nil {
		// The caller would not wait for the unlock; ending the session
		// frees the locks all the same.
		return nil
	}
	return fmt.Errorf("pglock: %w: unlock: %w", lock.ErrLeaseLost, err)
}

// onLost is the lease's OnLost: count, log, and end the session so its
// locks are free at once rather than when the server's idle timer fires,
// and so the connection returns even if the holder never calls Release.
func (h *handle) onLost(err error) {
	h.s.l.m.Lost()
	h.s.l.log.Warn("lease lost", "key", h.key, "err", err)
	h.s.end(err)
}

// end closes the session's connection, if it still has one, and loses
// every lease still on it with cause (which wraps lock.ErrLeaseLost).
func (s *session) end(cause error) {
	s.mu.Lock()
	s.stopWatch()
	c := s.conn
	s.conn = nil
	leases := s.leases
	s.leases = nil
	s.mu.Unlock()
	if c != nil {
		destroy(c)
	}
	s.l.forget(s)
	for h := range leases {
		h.lose(fmt.Errorf("pglock: %q: session ended: %w", h.key, cause))
	}
}

// destroy takes a connection out of the pool and closes it. Ending the
// session is the one sure way to drop whatever lock it holds or is about to
// be granted.
//
// A connection pgx gave up itself (an aborted or failed statement) is only
// marked closed, and Close does nothing: pgx closes its socket after a
// cancel request of its own, which a silent server holds for up to 15 s,
// the session's locks with it. Closing the socket here ends the session as
// soon as the server hears of it.
func destroy(c *pgxpool.Conn) {
	conn := c.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
	_ = conn.PgConn().Conn().Close()
}

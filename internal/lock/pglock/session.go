package pglock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/internal/lock"
)

// session is one dedicated lock connection and the leases whose locks it
// holds: one for a lone Acquire, every key of a batch or of a multi-key
// AcquireAll. Each lease releases its own key; the connection goes back to
// the pool with the last. Each lease has its own deadline, as if acquired
// alone: one that lapses while a sibling's extensions keep the session
// alive gives up its own key (see drop). The session itself lives and dies
// as one: when it ends (a failed keepalive or unlock, a lease lost while
// the session cannot be shown alive, a release that stopped waiting for
// it, Close), every lease on it is lost, since the server freed all its
// locks at once.
type session struct {
	l   *Locker
	ttl time.Duration

	// turn serialises every use of conn and guards the fields below. It
	// is a one-slot semaphore, not a mutex, so that a release can stop
	// waiting for a statement in flight (a keepalive to a server fallen
	// silent) when its context ends.
	turn chan struct{}
	// dying ends with the session (and with Close): it aborts the statement
	// in flight, so that ending a session never waits on a silent server.
	dying  context.Context
	kill   context.CancelFunc
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
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errClosed
	}
	s := &session{l: l, ttl: o.TTL, turn: make(chan struct{}, 1), conn: c, alive: sent, leases: make(map[*handle]struct{}, len(keys))}
	s.dying, s.kill = context.WithCancel(l.closing)
	s.turn <- struct{}{} // free: nobody else knows s yet
	defer s.leave()
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
// a socket deadline, then clears it). The caller has s's turn.
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
		close(done) // before end, which stops the watch in its turn
		if ctx.Err() == nil {
			s.end(fmt.Errorf("%w: the server ended the session: %w", lock.ErrLeaseLost, err))
		}
	}()
}

// stopWatch stops the watch, if one runs, before a statement or the end of
// the session. The caller has s's turn.
func (s *session) stopWatch() {
	if s.unwatch != nil {
		s.unwatch()
		s.unwatch = nil
	}
}

// enter takes s's turn, or returns ctx's error if ctx ends first. A free
// turn is taken even when ctx has ended, so that every caller sees the
// session's state in its turn (a release of an ended session returns nil);
// a statement then run with that ctx fails at once.
func (s *session) enter(ctx context.Context) error {
	select {
	case s.turn <- struct{}{}:
		return nil
	default:
	}
	select {
	case s.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leave gives s's turn back.
func (s *session) leave() { <-s.turn }

// bound returns a child of ctx that ends with the session too.
func (s *session) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.dying, cancel)
	return ctx, func() {
		stop()
		cancel()
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
// session and frees every lock on it, the other leases' too. Extend itself
// returns when ctx is cancelled, so that the release goes on at once; the
// release then waits for the statement in its own turn, as long as its own
// context allows (see unlock). Close and the session's end still abort it.
func (h *handle) Extend(ctx context.Context) (time.Time, error) {
	s := h.s
	if err := s.enter(ctx); err != nil {
		return time.Time{}, fmt.Errorf("pglock: %w: keepalive: waiting for the session: %w", lock.ErrLeaseLost, err)
	}
	if s.conn == nil {
		s.leave()
		return time.Time{}, fmt.Errorf("pglock: %w: connection already closed", lock.ErrLeaseLost)
	}
	if time.Since(s.alive) < s.ttl/refreshAfter {
		d := validUntil(s.alive, s.ttl)
		s.leave()
		return d, nil
	}
	type extended struct {
		until time.Time
		err   error
	}
	done := make(chan extended, 1)
	go func() {
		until, err := s.keepalive(ctx)
		if err != nil {
			// Whatever the cause, the session can no longer be shown alive
			// before the deadline; a released lease's keepalive loop, gone
			// by now, would not report it.
			s.end(err)
		}
		done <- extended{until, err}
	}()
	select {
	case e := <-done:
		return e.until, e.err
	case <-ctx.Done():
		return time.Time{}, fmt.Errorf("pglock: keepalive left running: %w", ctx.Err())
	}
}

// keepalive runs the keepalive statement in the turn Extend took, and
// gives the turn back.
func (s *session) keepalive(ctx context.Context) (time.Time, error) {
	defer s.leave()
	kctx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		kctx, cancel = context.WithDeadline(kctx, d)
		defer cancel()
	}
	kctx, stop := s.bound(kctx)
	defer stop()
	s.stopWatch()
	sent := time.Now()
	if _, err := s.conn.Exec(kctx, keepaliveSQL); err != nil {
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

// unlock releases hs, leases of s, in one statement. When it cannot (ctx
// ends while a statement in flight on the session, a keepalive to a server
// fallen silent, keeps it waiting; the statement fails; the session ends
// meanwhile), the session is ended instead: see abandon.
func (s *session) unlock(ctx context.Context, hs []*handle) error {
	// A release that begins on an ended session has nothing to undo: its
	// lease is lost already, and says so.
	alive := s.dying.Err() == nil
	if err := s.enter(ctx); err != nil {
		return s.abandon(ctx, alive, fmt.Errorf("the session was busy until the context ended: %w", err))
	}
	if s.conn == nil {
		ended := s.leases == nil // rather than handed back by its last release
		s.leave()
		if alive && ended {
			return s.abandon(ctx, true, errors.New("the session ended while the release waited for it"))
		}
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
		s.leave()
		return nil // released already
	}
	s.stopWatch()
	c, last := s.conn, len(s.leases) == 0
	qctx, stop := s.bound(ctx)
	var unlocked bool
	var err error
	if last {
		err = c.QueryRow(qctx, unlockSQL, keys, poolAppName).Scan(&unlocked, nil, nil)
	} else {
		err = c.QueryRow(qctx, unlockKeysSQL, keys).Scan(&unlocked)
	}
	stop()
	if err == nil && unlocked {
		if last {
			s.conn = nil
			s.kill()
		} else {
			s.watch()
		}
		s.leave()
		if last {
			s.l.forget(s)
			c.Release()
		}
		return nil
	}
	s.leave()
	if err == nil {
		// Cannot happen while the session lives; do not reuse a session in a
		// state we do not understand.
		err = errors.New("the session no longer held every lock")
	}
	return s.abandon(ctx, true, fmt.Errorf("unlock of %q failed: %w", keys, err))
}

// abandon ends s after a release could not unlock on it (why), and returns
// the release's error. The server frees the session's locks only once it
// hears the socket close, which a silent server may not do for a while, so
// the error wraps lock.ErrCleanupPending, whatever ended the session: unless
// the session had ended before the release began (alive false) and not by
// this call, when the release had nothing left to undo and returns nil.
func (s *session) abandon(ctx context.Context, alive bool, why error) error {
	// Read before end: the session ended otherwise, and the statement's
	// error (the cancellation of its bound) is not the caller's.
	endedElsewhere := s.dying.Err() != nil && ctx.Err() == nil
	if !s.end(fmt.Errorf("%w: a release failed: %w", lock.ErrLeaseLost, why)) && !alive {
		return nil
	}
	switch cerr := ctx.Err(); {
	case endedElsewhere:
		why = errors.New("the session was ended by a concurrent release, a lost lease or Close")
	case cerr != nil && !errors.Is(why, cerr):
		why = fmt.Errorf("%w: %w", why, cerr)
	}
	return fmt.Errorf("pglock: %w: unlock: %w; the session's socket is closed, and the server frees its locks once it hears", lock.ErrCleanupPending, why)
}

// onLost is the lease's OnLost: count, log, and free the lease's key at
// once rather than when the server's idle timer fires, so that the
// connection returns even if the holder never calls Release (see drop).
// A loss that comes from the session's end has nothing left to free.
func (h *handle) onLost(err error) {
	h.s.l.m.Lost()
	h.s.l.log.Warn("lease lost", "key", h.key, "err", err)
	if h.s.dying.Err() == nil {
		// Not on the caller's goroutine: the lease's keepalive, which a
		// Release waits for, must not wait for the session's turn.
		go h.s.drop(h, err)
	}
}

// drop frees the key of h, whose lease was just lost (cause). A lease
// lapses on our side at its own deadline, while its siblings' extensions
// may keep the session alive: the server holds the key until it is
// unlocked or the session ends. So while the session's last keepalive
// still covers now (the server cannot have ended it, and the watch has not
// seen it end), drop unlocks the key alone, as its Release would, within
// that cover; when the unlock fails, it ends the session (see unlock).
// Otherwise it ends the session, which frees every key on it.
func (s *session) drop(h *handle, cause error) {
	// Statements hold the turn no longer than their own bounds, a
	// keepalive's being within the session's cover; past a TTL the
	// session is in trouble anyway.
	ctx, cancel := s.bound(context.Background())
	defer cancel()
	wctx, cancelWait := context.WithTimeout(ctx, s.ttl)
	defer cancelWait()
	if err := s.enter(wctx); err != nil {
		if s.dying.Err() == nil {
			s.end(cause)
		}
		return
	}
	cover := validUntil(s.alive, s.ttl)
	alive := s.conn != nil && time.Now().Before(cover)
	s.leave()
	if !alive {
		s.end(cause)
		return
	}
	uctx, cancelUnlock := context.WithDeadline(ctx, cover)
	defer cancelUnlock()
	if err := s.unlock(uctx, []*handle{h}); err != nil {
		s.l.log.Warn("unlock of a lost lease failed: session ended", "key", h.key, "err", err)
	}
}

// end closes the session's connection, if it still has one, and loses
// every lease still on it with cause (which wraps lock.ErrLeaseLost). It
// aborts the statement in flight first, so it never waits on a silent
// server. It reports whether it ended the session: false when the session
// had ended before.
func (s *session) end(cause error) bool {
	s.kill()
	s.turn <- struct{}{}
	s.stopWatch()
	c := s.conn
	s.conn = nil
	leases := s.leases
	s.leases = nil
	s.leave()
	if c != nil {
		destroy(c)
	}
	s.l.forget(s)
	for h := range leases {
		h.lose(fmt.Errorf("pglock: %q: session ended: %w", h.key, cause))
	}
	return c != nil
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

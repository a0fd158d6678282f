package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/retry"
	"github.com/stockguard/stockguard/internal/lock/zklock/zkwire"
)

// errSessionGone means the session an attempt ran in was given up; its
// nodes died (or will die) with it, and the attempt starts over in the next.
var errSessionGone = errors.New("session gone")

// session is one ZooKeeper session and the leases held in it. go-zookeeper
// would quietly open a new session after an expiry on the same *zk.Conn; we
// never let it: a dead session's Conn is closed and a new session gets a new
// Conn, so no reply from a later session is ever mistaken for one of the
// session a waiter's node belongs to.
type session struct {
	l    *Locker
	conn *zk.Conn // set once, under l.mu, before any caller sees the session
	born time.Time

	lastRead atomic.Int64 // since born, in ns: when the server was last heard from
	// since born, in ns: when the write began of the latest request the
	// servers answered (the connect request included); they heard from the
	// session no earlier, so they cannot expire it before a timeout later.
	lastAnswered atomic.Int64
	// since born, in ns: the same for the latest request answered only once
	// the leader had it (a write, a sync, the connect request). The leader
	// expires sessions; a follower cut off from it answers anything else on
	// its own for a while, so only this bounds when a lease is lost.
	lastConfirmed atomic.Int64
	timeout       atomic.Int64                // negotiated session timeout, ns
	id            atomic.Int64                // session id from the last handshake
	tc            atomic.Pointer[trackedConn] // the connection dialled last

	// creds is the last handshake in full: SessionCredentials needs the
	// password, which go-zookeeper keeps to itself.
	creds atomic.Pointer[zkwire.ConnectResponse]

	dead chan struct{} // closed when the session is given up

	// Guarded by l.mu.
	sid       int64 // the session id we hold nodes in; 0 before the first handshake
	connected bool
	suspends  uint64      // bumped on every disconnect, so a stale timer knows it is stale
	timer     *time.Timer // gives the session up if it stays disconnected
	watch     *time.Timer // while connected: suspends the session if the servers go silent
	syncing   bool        // a sync sent by the watchdog is awaiting its reply
	gone      bool
	leases    map[*handle]func(error)
}

// newSessionLocked connects a new session; l.mu is held. zk.Connect only
// starts the client's goroutines, and their event callbacks wait for l.mu, so
// s.conn is set before any callback reads the session.
func (l *Locker) newSessionLocked() (*session, error) {
	s := &session{
		l:      l,
		born:   time.Now(),
		dead:   make(chan struct{}),
		leases: make(map[*handle]func(error)),
	}
	s.timeout.Store(int64(l.cfg.sessionTimeout))
	conn, _, err := zk.Connect(l.servers, l.cfg.sessionTimeout,
		zk.WithDialer(s.dial),
		zk.WithEventCallback(s.onEvent),
		zk.WithLogger(zkLogger{l.log}),
		zk.WithLogInfo(false))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: connect: %w", err)
	}
	s.conn = conn
	return s, nil
}

// now is the time since born, as the session's clocks keep it.
func (s *session) now() int64 { return int64(time.Since(s.born)) }

// at turns a time since born back into a time.
func (s *session) at(since int64) time.Time { return s.born.Add(time.Duration(since)) }

func (s *session) heard() { s.lastRead.Store(s.now()) }

// answered records that the servers answered a request whose write began
// at sent (since born).
func (s *session) answered(sent int64) {
	for {
		last := s.lastAnswered.Load()
		if sent <= last || s.lastAnswered.CompareAndSwap(last, sent) {
			return
		}
	}
}

// confirmed records that a request whose write began at sent (since born)
// went through the leader.
func (s *session) confirmed(sent int64) {
	for {
		last := s.lastConfirmed.Load()
		if sent <= last || s.lastConfirmed.CompareAndSwap(last, sent) {
			return
		}
	}
}

// leasesEnd is when the session's leases must be lost at the latest, the
// earliest the leader could expire the session. A request that went
// through the leader does not itself refresh the session there: a follower
// reports its sessions' activity only in its answers to the leader's
// pings, every tickTime/2 (at most a quarter of the timeout, ZooKeeper's
// minSessionTimeout being two ticks), so a follower cut off just after
// answering reported at best the activity a ping period before, which the
// session's pings and syncs (a third of the timeout apart at most) put no
// further back. Hence a timeout after the write of the latest confirmed
// request began, less a third and a quarter of it, and the drift allowance.
func (s *session) leasesEnd() time.Time {
	timeout := time.Duration(s.timeout.Load())
	return s.at(s.lastConfirmed.Load()).Add(timeout - timeout/3 - timeout/4 - retry.Drift(timeout))
}

// syncDue is when the watchdog of a session holding leases asks the leader
// to confirm it (a sync): a sixth of the timeout after the last request
// that went through the leader, so that leasesEnd, 5/12 of the timeout
// after it, stays ahead by more than a sync's round trip.
func (s *session) syncDue() time.Time {
	return s.at(s.lastConfirmed.Load()).Add(time.Duration(s.timeout.Load()) / 6)
}

// expiresAfter is the earliest the servers could expire the session, less
// the clock drift allowance of the other backends: a timeout after the
// write of the latest request they answered began. It is a send time, not
// the time of our last read: the servers time the session from when they
// last heard from us, which a reply says nothing more about.
func (s *session) expiresAfter() time.Time {
	timeout := time.Duration(s.timeout.Load())
	return s.at(s.lastAnswered.Load()).Add(timeout - retry.Drift(timeout))
}

// silentAt is when a connected session is suspended if the servers say
// nothing more: two thirds of the timeout after the last read, when the
// Java client (and go-zookeeper's read deadline) calls the connection
// dead, and in any case before the servers could expire the session, or,
// while it holds leases, before the leader could (leasesEnd); l.mu is held.
func (s *session) silentAt() time.Time {
	timeout := time.Duration(s.timeout.Load())
	at := s.at(s.lastRead.Load()).Add(timeout * 2 / 3)
	if byAnswer := s.expiresAfter(); byAnswer.Before(at) {
		at = byAnswer
	}
	if byLeader := s.leasesEnd(); len(s.leases) > 0 && byLeader.Before(at) {
		at = byLeader
	}
	return at
}

// watchLocked arms the watchdog at silentAt; l.mu is held.
//
// The watchdog is ours, not go-zookeeper's Disconnected event, because
// that event comes only once both of the client's loops have ended: its
// receive loop ends at its read deadline, but a send loop blocked in a
// write (the socket's send buffer full, as a silent partition leaves it)
// waits for that write's own deadline, up to two thirds of the timeout
// after the write began, and nobody closes the socket meanwhile. Leases
// would outlive the session by up to a third of the timeout. The Java
// client (Curator's base) checks its read timeout on its own clock
// whatever its I/O is doing, and closes the socket when it passes; so does
// this watchdog (checkSilent). Reads cost it nothing: they store their
// time (heard), and the timer, when it fires, looks at the latest one and
// re-arms itself, about every third of the timeout. While the session
// holds leases it also wakes at syncDue to send a sync (confirmLeases),
// one in flight at a time, so that leasesEnd keeps moving while the leader
// hears from the session and stops when only a cut-off follower does.
func (l *Locker) watchLocked(s *session) {
	at := s.silentAt()
	if due := s.syncDue(); len(s.leases) > 0 && !s.syncing && due.Before(at) {
		at = due
	}
	d := max(time.Until(at), 0)
	if s.watch == nil {
		s.watch = time.AfterFunc(d, func() { l.checkSilent(s) })
		return
	}
	s.watch.Reset(d)
}

// checkSilent runs at silentAt, or earlier at syncDue: once silentAt has
// passed it suspends the session, by the path a disconnect takes, and
// closes the connection, so that go-zookeeper reconnects now instead of at
// the end of a blocked write; before, it sends the sync that is due.
func (l *Locker) checkSilent(s *session) {
	l.mu.Lock()
	if s.gone || !s.connected {
		l.mu.Unlock() // resumed arms the watchdog again
		return
	}
	if at := s.silentAt(); time.Now().Before(at) {
		if len(s.leases) > 0 && !s.syncing && !time.Now().Before(s.syncDue()) {
			s.syncing = true
			l.bg.Add(1) // under l.mu, so it happens before Close waits
			go l.confirmLeases(s)
		}
		l.watchLocked(s)
		l.mu.Unlock()
		return
	}
	// While connected, the connection dialled last is the connected one:
	// go-zookeeper dials again only after its Disconnected event, which
	// waits for l.mu to mark the session disconnected. The verdict is acted
	// on under the same hold of l.mu: released in between, go-zookeeper
	// could disconnect, dial, and resume on a new connection, and the
	// verdict would then suspend that healthy one for good (no event would
	// ever resume it).
	tc := s.tc.Load()
	timeout := time.Duration(s.timeout.Load())
	why := fmt.Sprintf("nothing read for %v of a %v session timeout",
		time.Since(s.at(s.lastRead.Load())).Round(time.Millisecond), timeout)
	if len(s.leases) > 0 && !time.Now().Before(s.leasesEnd()) {
		why = fmt.Sprintf("no request through the leader answered in the %v since the last one was sent, of a %v session timeout",
			time.Since(s.at(s.lastConfirmed.Load())).Round(time.Millisecond), timeout)
	}
	after := l.suspendLocked(s, why)
	l.mu.Unlock()
	after()
	if tc != nil {
		_ = tc.Conn.Close()
	}
}

// confirmLeases sends a sync, which a follower answers only once the
// leader has answered it; its reply moves leasesEnd (confirmed). Sync
// takes no context: it returns when answered, or with the connection
// (go-zookeeper fails a connection's pending requests when it drops, and
// every request when the Conn is closed).
func (l *Locker) confirmLeases(s *session) {
	defer l.bg.Done()
	_, err := s.conn.Sync("/")
	l.mu.Lock()
	s.syncing = false
	if !s.gone && s.connected {
		l.watchLocked(s)
	}
	l.mu.Unlock()
	if err != nil {
		l.log.Debug("zookeeper: sync confirming the session's leases failed", "err", err)
	}
}

func (s *session) handshook(info zkwire.ConnectResponse) {
	s.creds.Store(&info)
	s.id.Store(info.SessionID)
	if info.Timeout > 0 {
		s.timeout.Store(int64(info.Timeout))
	}
}

// onEvent runs on go-zookeeper's goroutines and must not block for long.
func (s *session) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		s.l.resumed(s)
	case zk.StateDisconnected:
		s.l.suspended(s, "disconnected")
	case zk.StateExpired:
		s.l.giveUp(s, lostExpired, errors.New("session expired"))
	}
}

func (l *Locker) resumed(s *session) {
	l.mu.Lock()
	if s.gone {
		l.mu.Unlock()
		return
	}
	id := s.id.Load()
	if s.sid != 0 && id != s.sid {
		// A handshake that silently gave us another session: ours expired.
		l.mu.Unlock()
		l.giveUp(s, lostExpired, fmt.Errorf("session %#x replaced by %#x", s.sid, id))
		return
	}
	wasSuspended := s.sid != 0 && !s.connected
	s.sid, s.connected = id, true
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	l.watchLocked(s)
	l.mu.Unlock()
	if wasSuspended {
		l.log.Info("zookeeper: session resumed", "session", fmt.Sprintf("%#x", id))
	}
}

// suspended handles a disconnect (Curator's SUSPENDED): go-zookeeper's
// Disconnected event, or the watchdog's verdict that the servers went
// silent (checkSilent), whichever comes first. Every lease in the session
// is lost at once: a holder that cannot reach the ensemble cannot know it
// still holds, and its writes are refused by the fence anyway once someone
// else does. The session itself is kept: its waiters stay queued, and if
// it reconnects in time the lost leases' nodes are deleted then (in the
// background), so the keys pass to the next waiter without waiting for an
// expiry.
//
// The session is given up (LOST) at expiresAfter, before the servers could
// have expired it: a timeout, less the drift allowance, after the write of
// the last request they answered began. A disconnect noticed at once (a
// reset, a server going down) leaves nearly the whole timeout to
// reconnect; a silent one, noticed two thirds of the timeout after the
// last read, leaves about a third. Curator waits a whole timeout from the
// disconnect instead, which can be after the real expiry; giving up early
// costs a re-queue, giving up late would let waiters believe in nodes that
// are gone.
func (l *Locker) suspended(s *session, why string) {
	l.mu.Lock()
	after := l.suspendLocked(s, why)
	l.mu.Unlock()
	after()
}

// suspendLocked is suspended with l.mu held; it returns what suspended
// does once l.mu is released: log, and lose the leases.
func (l *Locker) suspendLocked(s *session, why string) (after func()) {
	if s.gone || !s.connected {
		return func() {}
	}
	s.connected = false
	s.suspends++
	gen := s.suspends
	lostAt := s.expiresAfter()
	var check func()
	check = func() {
		l.mu.Lock()
		if s.gone || s.connected || s.suspends != gen {
			l.mu.Unlock()
			return
		}
		// A handshake may have been answered since (its resumed is on the way).
		if at := s.expiresAfter(); time.Now().Before(at) {
			s.timer = time.AfterFunc(time.Until(at), check)
			l.mu.Unlock()
			return
		}
		timeout := time.Duration(s.timeout.Load())
		since := time.Since(s.at(s.lastAnswered.Load())).Round(time.Millisecond)
		l.mu.Unlock()
		l.giveUp(s, lostTimeout, fmt.Errorf("no request answered in the %v since the last one was sent, of a %v session timeout",
			since, timeout))
	}
	s.timer = time.AfterFunc(max(time.Until(lostAt), 0), check)
	leases := s.leases
	s.leases = make(map[*handle]func(error))
	l.bg.Add(len(leases)) // under l.mu, so it happens before Close waits
	sid := s.sid
	return func() {
		l.log.Warn("zookeeper: session suspended", "session", fmt.Sprintf("%#x", sid), "why", why,
			"lost_in", time.Until(lostAt).Round(time.Millisecond), "leases_lost", len(leases))
		for h, lose := range leases {
			lose(fmt.Errorf("zookeeper: %q: %w: session disconnected", h.n.key, lock.ErrLeaseLost))
			go func() {
				defer l.bg.Done()
				// Waits in the client for the reconnection; gives up with the session.
				if err := s.deleteUntilGone(h.n); err != nil {
					l.log.Warn("zookeeper: node of a lease lost to a disconnect not deleted", "node", h.n.path(), "err", err)
				}
			}()
		}
	}
}

// giveUp ends a session for good: every lease in it is lost, waiters in it
// start over, and the Locker moves to a new session. The old Conn is closed
// in the background; if it can still reach a server, closing it deletes the
// session's nodes at once, otherwise the server expires them. An empty
// reason means the Locker is closing: no new session, nothing counted as
// lost but the leases, and Close closes the Conn itself.
func (l *Locker) giveUp(s *session, reason string, cause error) {
	l.mu.Lock()
	if s.gone {
		l.mu.Unlock()
		return
	}
	s.gone = true
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.watch != nil {
		s.watch.Stop()
	}
	close(s.dead)
	sid := s.sid
	leases := s.leases
	s.leases = nil
	if l.cur == s {
		l.cur = nil
		if !l.closed {
			// Connect only starts goroutines; if it fails (no server name
			// resolves), the next caller of session() tries again.
			l.cur, _ = l.newSessionLocked()
		}
	}
	if reason != "" {
		l.bg.Add(1) // under l.mu, so it happens before Close waits
		go func() {
			defer l.bg.Done()
			s.conn.Close()
		}()
	}
	l.mu.Unlock()

	if reason != "" {
		l.m.sessionsLost.WithLabelValues(reason).Inc()
		l.log.Warn("zookeeper: session lost", "session", fmt.Sprintf("%#x", sid),
			"reason", reason, "cause", cause, "leases", len(leases))
	}
	for h, lose := range leases {
		lose(fmt.Errorf("zookeeper: %q: %w: %w", h.n.key, lock.ErrLeaseLost, cause))
	}
}

func (s *session) isGone() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// mayHaveExpired reports a disconnected session past expiresAfter: the
// servers may have expired it, and its nodes with it.
func (s *session) mayHaveExpired() bool {
	return !s.isConnected() && time.Now().After(s.expiresAfter())
}

func (s *session) isConnected() bool {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.connected && !s.gone
}

// errDisconnected means the session lost its connection between the
// verdict that granted a lock and the lease: a lease handed out now would be
// born lost. The attempt deletes its nodes and starts over.
var errDisconnected = errors.New("session disconnected as the lock was granted")

// register records the leases of one attempt, all or none, so that a
// disconnect or the loss of the session loses them. It fails with
// errSessionGone when the session is gone (its nodes with it) and with
// errDisconnected while it is disconnected.
func (s *session) register(hs []*handle, loses []func(error)) error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	switch {
	case s.gone:
		return errSessionGone
	case !s.connected:
		return errDisconnected
	}
	for i, h := range hs {
		s.leases[h] = loses[i]
	}
	s.l.watchLocked(s) // leases bring leasesEnd and syncDue into it
	return nil
}

// confirm makes sure, before leases are handed out, that the leader heard
// from the session lately: a waiter may have been granted after a long
// wait, its verdict read from a follower that may be cut off from the
// leader. A sync is sent unless a request that went through the leader was
// sent within the last sixth of the timeout (syncDue).
func (s *session) confirm(ctx context.Context) error {
	if time.Now().Before(s.syncDue()) {
		return nil
	}
	err := s.run(ctx, func() error {
		_, err := s.conn.Sync("/")
		return err
	})
	switch {
	case err == nil || errors.Is(err, ctx.Err()):
		return err
	case errors.Is(s.classify(err), errSessionGone):
		return errSessionGone
	case cutOff(err):
		return fmt.Errorf("%w: sync: %w", errDisconnected, err)
	}
	return fmt.Errorf("zookeeper: sync: %w", err)
}

// unregister forgets a released lease. False when there is nothing left to
// delete: the session is gone, or a disconnect lost the lease and its node
// is being deleted already.
func (s *session) unregister(h *handle) bool {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	_, ok := s.leases[h]
	delete(s.leases, h)
	return ok && !s.gone
}

// run calls op, which talks to the ensemble, without letting it outlast ctx
// or the session: go-zookeeper takes no context, and a request made while
// disconnected waits for a server. An abandoned op finishes on its own
// goroutine; callers must not read what it writes after run returns early.
func (s *session) run(ctx context.Context, op func() error) error {
	if ctx.Done() == nil {
		return op()
	}
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.dead:
		return errSessionGone
	}
}

// classify turns a client error into errSessionGone when the session is,
// or is about to be, given up.
func (s *session) classify(err error) error {
	if errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrClosing) || s.isGone() {
		return errSessionGone
	}
	return err
}

// lostResponse reports errors after which a write may or may not have been
// applied: the connection died with the request in flight. A request whose
// own write to the socket failed as the connection dropped gets the
// socket's error (a *net.OpError: "use of closed network connection",
// EPIPE), not ErrConnectionClosed, from go-zookeeper; it is the same loss,
// and the request may have reached the server in part or whole.
func lostResponse(err error) bool {
	var op *net.OpError
	return errors.Is(err, zk.ErrConnectionClosed) || errors.As(err, &op)
}

// unsent reports a request go-zookeeper gave up before writing it: queued
// while no server could be reached, it is flushed with ErrNoServer each
// time the client has tried every server. Nothing reached the ensemble.
func unsent(err error) bool { return errors.Is(err, zk.ErrNoServer) }

// cutOff reports a request a disconnect kept from its answer, sent or not:
// worth repeating once the session reconnects, if repeating is harmless.
func cutOff(err error) bool { return lostResponse(err) || unsent(err) }

// zkLogger sends go-zookeeper's messages to slog at debug level: the
// Locker logs what matters (suspended, resumed, lost) itself.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.l.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

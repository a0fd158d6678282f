package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// errSessionGone means the session an attempt ran in has ended; its keys
// died (or will die) with its lease, and the attempt starts over in the next.
var errSessionGone = errors.New("session gone")

// errKeyGone means an attempt's waiter key was deleted by someone else (an
// operator, say) while the session lives; the attempt starts over too.
var errKeyGone = errors.New("waiter key deleted by another client")

// startOver reports whether an attempt that failed with err should run
// again, in the current session or the next.
func startOver(err error) bool {
	return errors.Is(err, errSessionGone) || errors.Is(err, errKeyGone)
}

// revokeTimeout bounds revoking a given-up session's lease; if it cannot be
// revoked the cluster expires it after its TTL anyway.
const revokeTimeout = 2 * time.Second

// renewRetry spaces renewal calls that fail at once (a call that fails by
// its timeout is followed by the next at once).
const renewRetry = 50 * time.Millisecond

// silence is how long a watch may say nothing before the Locker reads
// what it would have told: a frozen member keeps its connection open and
// cancels nothing, and the client's keepalive finds it dead only some 11 s
// on (see New). About TTL/4, the bound of a renewal call, so that a frozen
// member costs a waiter, or the session's watch, about what it costs the
// session: one call's bound, and a retried read. Drawn from
// [3TTL/16, TTL/4], so that waiters that queued together do not read
// together ever after.
//
// A watch silent because nothing changed pays for that too: a waiter reads
// its line again and watches anew (a read-only transaction, a watch
// creation and cancel per waiter per silence: some 900 of each a second
// per instance for 1,000 waiting keys at the default TTL on an idle
// cluster), the session its keys (see watchKeys). Progress requests on the
// Locker's watch stream would tell a live member from a frozen one for
// every watch at once, but etcd before 3.4.25 and 3.5.8 answers them even
// for watches still catching up, and the client then resumes a broken
// watch past events it never delivered (etcd issue 15220); later servers
// answer none while any watch of the stream catches up (etcd issue 20242),
// as a waiter's watch from its read's revision may.
func (s *session) silence() time.Duration { return s.ttl/4 - rand.N(s.ttl/16) }

// session is one etcd lease, which the session renews itself (see
// keepAlive), and the leases granted in it.
type session struct {
	l   *Locker
	id  clientv3.LeaseID
	ttl time.Duration // as granted: the servers may raise the TTL asked for

	ctx context.Context // cancelled when the session is given up
	end context.CancelFunc
	// check asks keepAlive for a renewal now: a key of ours vanished, and
	// the lease may have been revoked (one slot; a full one is enough).
	check chan struct{}

	// Guarded by l.mu.
	gone bool
	// keys is every waiter key of the session, from before its put is sent
	// until it is released or abandoned (see entry, watchKeys).
	keys     map[string]*entry
	deadline time.Time     // until when the lease is surely ours (see keepAlive)
	renewed  chan struct{} // closed, and replaced, at each answered renewal

	// lastRead is the revision of the session watch's last recheck, or of
	// the grant: every key put since is created after it (see resume). Only
	// the watch's goroutine uses it.
	lastRead int64
}

// session returns the current session, granting a new lease if there is
// none. Only one caller grants at a time; the others wait for it, or for
// their own context.
func (l *Locker) session(ctx context.Context) (*session, error) {
	if s, err := l.current(); s != nil || err != nil {
		return s, err
	}
	select {
	case l.opening <- struct{}{}:
		defer func() { <-l.opening }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if s, err := l.current(); s != nil || err != nil {
		return s, err // another caller opened it while we waited
	}
	s, err := l.open(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (open session: %w)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("%w: open session: %w", lock.ErrUnavailable, err)
	}
	return s, nil
}

func (l *Locker) current() (*session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("%w: %w", errClosed, lock.ErrUnavailable)
	}
	return l.cur, nil
}

// open grants a lease with the caller's context (bounded by the dial
// timeout) and then keeps it alive with the Locker's: a caller giving up must
// not end a session other leases live in.
func (l *Locker) open(ctx context.Context) (*session, error) {
	gctx, cancel := context.WithTimeout(ctx, l.cfg.dialTimeout)
	defer cancel()
	sent := time.Now()
	grant, err := l.cli.Grant(gctx, l.cfg.ttlSeconds())
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	ttl := time.Duration(grant.TTL) * time.Second
	sctx, end := context.WithCancel(l.life)
	s := &session{l: l, id: grant.ID, ttl: ttl, ctx: sctx, end: end, check: make(chan struct{}, 1),
		keys: make(map[string]*entry), deadline: validUntil(sent, ttl), renewed: make(chan struct{}),
		lastRead: grant.Revision}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		end()
		l.revokeLater(grant.ID)
		return nil, fmt.Errorf("%w: %w", errClosed, lock.ErrUnavailable)
	}
	l.cur = s
	l.bg.Go(func() { s.keepAlive(sent) })
	// Every key of the session is created after the grant: the watch from
	// the grant's revision on sees each one's deletion.
	l.bg.Go(func() { s.watchKeys(grant.Revision + 1) })
	l.mu.Unlock()
	l.log.Info("etcd: session opened", "lease", fmt.Sprintf("%x", grant.ID), "ttl_s", grant.TTL)
	return s, nil
}

// validUntil is until when a lease the servers renewed (or granted) no
// earlier than sent is surely ours. The servers time the TTL on their own
// clocks, so it keeps the other backends' allowance for clock drift: the
// session must end on our side before the cluster can expire it.
func validUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - retry.Drift(ttl))
}

// keepAlive renews the session's lease every TTL/3 until the session is
// given up, and gives it up itself at its deadline, validUntil the send
// time of the last answered renewal: the servers renew no earlier than
// that send and time the TTL from their renewal, so the session ends here
// before the cluster can free its keys.
//
// Each renewal is a call of its own (KeepAliveOnce, a fresh stream the
// balancer places on the next member) that may take TTL/4, so a frozen
// member holds up one call and the next goes elsewhere, at least twice
// before the deadline: the one after a renewal no member answered in time
// is two calls at once on two members (see members); after an answered
// error, one call again, renewRetry later. One long-lived keepalive
// stream, concurrency.Session's, stays on a frozen member until gRPC's
// keepalive gives up on the connection, some 11 s later (gRPC raises pings
// below 10 s to 10 s), longer than the TTL.
//
// A renewal also goes out at once when the session's watch saw a key of
// ours deleted (check): a revoked lease is then found at once, not at the
// next renewal.
func (s *session) keepAlive(sent time.Time) {
	next := sent.Add(s.ttl / 3)
	balanced := []caller{s.l.cli}
	via := balanced
	for {
		deadline := s.validity()
		t := time.NewTimer(time.Until(earlier(next, deadline)))
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-s.check:
			t.Stop()
		case <-t.C:
		}
		if !time.Now().Before(deadline) {
			s.l.giveUp(s, fmt.Errorf("session lease %x: no renewal answered before its deadline", s.id))
			return
		}
		sent := time.Now()
		cctx, cancel := context.WithDeadline(s.ctx, earlier(sent.Add(s.ttl/4), deadline))
		resp, err := race(cctx, via, func(c context.Context, v caller) (*clientv3.LeaseKeepAliveResponse, error) {
			return v.KeepAliveOnce(c, s.id)
		})
		unanswered := cctx.Err() != nil
		cancel()
		via = balanced
		switch {
		case s.ctx.Err() != nil:
			return
		case err == nil:
			s.renew(validUntil(sent, time.Duration(resp.TTL)*time.Second))
			next = sent.Add(s.ttl / 3)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.l.giveUp(s, fmt.Errorf("session lease %x expired or was revoked", s.id))
			return
		default:
			s.l.log.Debug("etcd: lease renewal failed; trying again", "lease", fmt.Sprintf("%x", s.id), "err", err)
			next = time.Now().Add(renewRetry)
			if unanswered {
				via = s.l.members.pair()
			}
		}
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (s *session) validity() time.Time {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.deadline
}

func (s *session) renew(deadline time.Time) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	s.deadline = deadline
	close(s.renewed)
	s.renewed = make(chan struct{})
}

// valid returns the session's deadline for a lease to take as its own. A
// lease's keepalive asks for it every TTL/3 and, given one less than that
// away, stops asking and ends the lease at it, even if the session renews
// meanwhile. So valid hands out a deadline only while it is more than
// TTL/3 + TTL/24 away, and otherwise waits for the next answered renewal,
// or the session's end (errSessionGone). That costs a renewed session
// nothing: with calls bounded by TTL/4, an answered renewal leaves the
// deadline at least 3TTL/4 - drift away, and one answered since a lease's
// last ask leaves it still far enough at the next. A lease that waits here
// has its session's very deadline, and ends with the session, not before.
func (s *session) valid(ctx context.Context) (time.Time, error) {
	for {
		s.l.mu.Lock()
		deadline, renewed, gone := s.deadline, s.renewed, s.gone
		s.l.mu.Unlock()
		if gone {
			return time.Time{}, errSessionGone
		}
		if time.Until(deadline) > s.ttl/3+s.ttl/24 {
			return deadline, nil
		}
		select {
		case <-renewed:
		case <-s.ctx.Done():
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

var _ lock.Extender = (*handle)(nil)

// Extend implements lock.Extender: the session renews the one etcd lease
// every lease of it lives in, and Extend gives the lease the session's
// deadline (see valid).
func (h *handle) Extend(ctx context.Context) (time.Time, error) {
	deadline, err := h.s.valid(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("etcd: %w: session %x: %w", lock.ErrLeaseLost, h.s.id, err)
	}
	return deadline, nil
}

// giveUp ends a session for good: every lease in it is lost and waiters in
// it start over; the next caller opens a new session. The lease is revoked
// in the background so its keys go at once rather than after the TTL.
// cause errClosed means the Locker is closing: nothing counts as a lost
// session, only as lost leases.
func (l *Locker) giveUp(s *session, cause error) {
	l.mu.Lock()
	if s.gone {
		l.mu.Unlock()
		return
	}
	s.gone = true
	s.end()
	var leases []func(error)
	for _, e := range s.keys {
		if e.lose != nil {
			leases = append(leases, e.lose)
		}
	}
	s.keys = nil
	if l.cur == s {
		l.cur = nil
	}
	l.mu.Unlock()

	if !errors.Is(cause, errClosed) {
		l.m.sessionsLost.Inc()
		l.log.Warn("etcd: session lost", "lease", fmt.Sprintf("%x", s.id), "leases", len(leases), "err", cause)
	}
	err := fmt.Errorf("etcd: %w: %w", lock.ErrLeaseLost, cause)
	for _, lose := range leases {
		lose(err)
	}
	l.revokeLater(s.id)
}

// background runs f on its own goroutine unless the Locker has finished
// closing (false: f does not run); Close waits for every f started before
// that.
func (l *Locker) background(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.drained {
		return false
	}
	l.bg.Go(f)
	return true
}

func (l *Locker) revokeLater(id clientv3.LeaseID) {
	l.background(func() {
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		defer cancel()
		if _, err := l.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			l.log.Info("etcd: lease not revoked; the cluster expires it after its TTL", "lease", fmt.Sprintf("%x", id), "err", err)
		}
	})
}

func (s *session) isGone() bool { return s.ctx.Err() != nil }

// classify maps an error of a request made in s: a lease the cluster no
// longer knows means the session ended (the keepalive has not noticed yet).
func (s *session) classify(err error) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.l.giveUp(s, err)
		return fmt.Errorf("%w: %w", errSessionGone, err)
	}
	if s.isGone() {
		return fmt.Errorf("%w: %w", errSessionGone, err)
	}
	return err
}

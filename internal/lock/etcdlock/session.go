package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/stockguard/stockguard/internal/lock"
)

// errSessionGone means the session an attempt ran in has ended; its keys
// died (or will die) with its lease, and the attempt starts over in the next.
var errSessionGone = errors.New("session gone")

// revokeTimeout bounds revoking a given-up session's lease; if it cannot be
// revoked the cluster expires it after its TTL anyway.
const revokeTimeout = 2 * time.Second

// session is one etcd lease with its keepalive and the leases granted in it.
type session struct {
	l  *Locker
	cs *concurrency.Session
	id clientv3.LeaseID

	dead chan struct{} // closed when the session is given up

	// Guarded by l.mu.
	gone   bool
	leases map[*handle]func(error)
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
	grant, err := l.cli.Grant(gctx, l.cfg.ttlSeconds())
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	cs, err := concurrency.NewSession(l.cli, concurrency.WithLease(grant.ID),
		concurrency.WithTTL(int(grant.TTL)), concurrency.WithContext(l.life))
	if err != nil {
		l.revokeLater(grant.ID)
		return nil, fmt.Errorf("keep lease %x alive: %w", grant.ID, err)
	}
	s := &session{l: l, cs: cs, id: grant.ID, dead: make(chan struct{}), leases: make(map[*handle]func(error))}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		cs.Orphan()
		l.revokeLater(grant.ID)
		return nil, fmt.Errorf("%w: %w", errClosed, lock.ErrUnavailable)
	}
	l.cur = s
	l.mu.Unlock()
	go func() {
		select {
		case <-cs.Done():
			l.giveUp(s, fmt.Errorf("session lease %x expired or was revoked", s.id))
		case <-s.dead:
		}
	}()
	l.log.Info("etcd: session opened", "lease", fmt.Sprintf("%x", grant.ID), "ttl_s", grant.TTL)
	return s, nil
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
	close(s.dead)
	leases := s.leases
	s.leases = nil
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
	s.cs.Orphan()
	l.revokeLater(s.id)
}

// background runs f on its own goroutine unless the Locker has finished
// closing; Close waits for every f started before that.
func (l *Locker) background(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.drained {
		return
	}
	l.bg.Go(f)
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

// register adds a granted lease to the session, so that its loss reaches
// the lease; false if the session ended meanwhile.
func (s *session) register(h *handle, lose func(error)) bool {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.gone {
		return false
	}
	s.leases[h] = lose
	return true
}

// unregister removes a released lease; false if the session already ended,
// taking the lease's key with it.
func (s *session) unregister(h *handle) bool {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.gone {
		return false
	}
	delete(s.leases, h)
	return true
}

func (s *session) isGone() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

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

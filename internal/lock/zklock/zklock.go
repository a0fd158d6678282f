// Package zklock is the ZooKeeper lock backend: the classic recipe of
// ephemeral sequential nodes, written on go-zookeeper's primitives.
//
// A key's waiters queue as children of <root>/<key>; the lowest sequence
// holds the lock and every other waiter watches only the node just ahead of
// it, so a release wakes one waiter, not all. Nodes are ephemeral: they live
// as long as the Locker's session, and so do the leases. The fencing token
// is the zxid of the transaction that created the holder's node.
//
// A disconnect loses every lease of the session at once (Curator's
// SUSPENDED, read conservatively: a holder that cannot reach the ensemble
// cannot know it still holds); Ping fails and Acquire waits. A disconnect
// is go-zookeeper's report of one or, whichever comes first, the Locker's
// own watchdog finding nothing read for two thirds of the session timeout
// (the Java client's read timeout), or no request answered for a timeout
// less a drift allowance: go-zookeeper's report can come a third of the
// timeout later, after the servers expired the session. While the session
// holds leases, the watchdog also suspends it when no request that went
// through the leader (a write, or the sync it sends every sixth of the
// timeout) was sent within 5/12 of the timeout less the drift allowance: a
// follower cut off from the quorum answers pings and reads for syncLimit ×
// tickTime, while the leader, which alone expires sessions, hears nothing
// of this one; and the leader learns of a session's activity only from the
// follower's answers to its pings (every tickTime/2, at most a quarter of
// the timeout), so a confirmed request vouches for the activity up to a
// ping period and a ping or sync gap (a third of the timeout) before it
// (leasesEnd). A lease is granted only after such a request was sent
// within the last sixth of the timeout (a sync if none was). The bound
// holds for any tickTime; its price is that a sync unanswered for about a
// quarter of the timeout (a leader stalled that long) ends the leases.
//
// If the session reconnects before the servers could have expired it (a
// timeout, less 1% and 2 ms, after the write of the last request they
// answered), the lost leases' nodes are deleted and its waiters keep their
// place. That leaves nearly the whole timeout to reconnect after a
// disconnect noticed at once (a reset, a server going down), about a third
// after a silent one. Otherwise, or if the servers report it expired, the
// Locker gives it up and goes on in a new session, where its waiters queue
// again, at the back. A server that accepts a connection and does not
// answer the handshake is left for the next after its share of the timeout
// (timeout ÷ servers), as the Java client does.
// A lease has no deadline of its own: Done is its only end.
//
// A key's parent is a container znode: the servers remove it once its last
// node has gone, whoever left last (a holder, a waiter giving up, a
// cancelled acquisition), so no client deletes a parent another is creating
// a node under. AcquireBatch creates a batch's nodes in one multi and reads
// the queues of those not first in one pipelined round; a lock.Set of one
// session's leases is released in one multi.
//
// zk.Lock, the client's own recipe, has no token, no context, no signal when
// the session is lost, leaves every key's parent behind and orders waiters by
// a signed 32-bit sequence that wraps; this package has none of those flaws.
package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
)

const backendName = "zookeeper"

var errClosed = errors.New("locker closed")

// Locker takes locks in one ZooKeeper ensemble through one session, shared
// by every lease it grants (one Locker per service instance). When that
// session is lost, every lease in it is lost and the Locker opens a new one.
type Locker struct {
	servers []string
	cfg     config
	m       *metrics
	log     *slog.Logger
	acl     []zk.ACL
	parents parentHints

	mu     sync.Mutex
	cur    *session // nil only after Close, or if a reconnect failed to start
	closed bool
	bg     sync.WaitGroup // closing of given-up sessions' connections
}

var _ lock.Locker = (*Locker)(nil)

// New returns a Locker for the ensemble at servers ("host:port"). It starts
// connecting and returns at once; Acquire waits for the session, and Ping
// tells whether there is one.
func New(servers []string, opts ...Option) (*Locker, error) {
	if len(servers) == 0 {
		return nil, errors.New("zookeeper: no servers")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.reg)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: metrics: %w", err)
	}
	l := &Locker{
		servers: append([]string(nil), servers...),
		cfg:     cfg,
		m:       m,
		log:     cfg.log,
		acl:     zk.WorldACL(zk.PermAll),
		parents: parentHints{present: make(map[string]struct{})},
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur, err = l.newSessionLocked(); err != nil {
		return nil, err
	}
	return l, nil
}

// Name implements lock.Locker.
func (l *Locker) Name() string { return backendName }

// Fenced implements lock.Locker: tokens are czxids.
func (l *Locker) Fenced() bool { return true }

// session returns the current session, starting one if the last attempt to
// replace a lost session failed.
func (l *Locker) session() (*session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("%w: %w", errClosed, lock.ErrUnavailable)
	}
	if l.cur == nil {
		s, err := l.newSessionLocked()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", err, lock.ErrUnavailable)
		}
		l.cur = s
	}
	return l.cur, nil
}

// Ping implements lock.Locker: it fails unless the session is connected and
// the server it is connected to answers a read.
func (l *Locker) Ping(ctx context.Context) error {
	s, err := l.session()
	if err != nil {
		return fmt.Errorf("zookeeper: ping: %w", err)
	}
	if !s.isConnected() {
		return fmt.Errorf("zookeeper: ping: session not connected (%v): %w", s.conn.State(), lock.ErrUnavailable)
	}
	err = s.run(ctx, func() error {
		_, _, err := s.conn.Exists("/")
		return err
	})
	if err != nil {
		return fmt.Errorf("zookeeper: ping: %w: %w", lock.ErrUnavailable, err)
	}
	return nil
}

// Close implements lock.Locker. It closes the session, which makes the
// servers delete its nodes at once; every lease still held is lost.
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
		l.giveUp(s, "", errClosed)
		s.conn.Close()
	}
	l.bg.Wait()
	return nil
}

// Acquire implements lock.Locker. Options other than TryOnce do not apply:
// a lease has no TTL, it lasts as long as the session.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	start := time.Now()
	lease, err := l.acquire(ctx, key, lock.Apply(0, opts))
	if err != nil {
		l.m.Failed(lockmetrics.Reason(err))
		return nil, fmt.Errorf("zookeeper: acquire %q: %w", key, err)
	}
	l.m.Acquired(time.Since(start))
	return lease, nil
}

func (l *Locker) acquire(ctx context.Context, key string, o lock.Options) (*lock.Lease, error) {
	if err := checkName(key); err != nil {
		return nil, fmt.Errorf("%w: %w", lock.ErrInvalidKey, err)
	}
	var lease *lock.Lease
	err := l.inSession(ctx, func(s *session) (err error) {
		lease, err = s.acquire(ctx, key, o)
		return err
	})
	return lease, err
}

// inSession runs attempt in the current session until it succeeds, fails
// for good, or ctx ends; an attempt whose session went (or disconnected as
// it was granted) starts over in the next.
func (l *Locker) inSession(ctx context.Context, attempt func(*session) error) error {
	// pending is an attempt's clean-up still running: nodes of it may stand
	// in their lines, which a caller giving up must hear of.
	var pending error
	for {
		if err := ctx.Err(); err != nil {
			if pending != nil {
				return fmt.Errorf("%w (an earlier try: %w)", err, pending)
			}
			return err
		}
		s, err := l.session()
		if err != nil {
			return err
		}
		err = attempt(s)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errSessionGone), errors.Is(err, errDisconnected):
			// The nodes died with the session, or were deleted (or are
			// being): queue again.
			if errors.Is(err, lock.ErrCleanupPending) {
				pending = err
			}
			if errors.Is(err, errDisconnected) {
				// Until the session resumes or is given up, every try would
				// be refused the same way: don't spin on the ensemble.
				select {
				case <-ctx.Done():
				case <-time.After(retryPause):
				}
			}
			continue
		case errors.Is(err, lock.ErrNotAcquired):
			return err
		case ctx.Err() != nil:
			// However the attempt ended, it ended because ctx did.
			if !errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("%w (%w)", ctx.Err(), err)
			}
			if !s.isConnected() {
				// The reason it took that long is the ensemble, which
				// callers (and Ping) report as unavailable.
				err = fmt.Errorf("%w (session not connected: %w)", err, lock.ErrUnavailable)
			}
			return err
		default:
			// Whatever else the ensemble answered, callers can only retry later.
			return fmt.Errorf("%w: %w", lock.ErrUnavailable, err)
		}
	}
}

// parentHints remembers which keys' parents we last saw present, so that a
// key in use costs no container create per acquisition. The servers reap a
// parent some time after it was emptied; the create that then finds it
// gone (ErrNoNode) clears the hint, so a stale one costs a round trip,
// never a wrong answer.
type parentHints struct {
	mu      sync.Mutex
	present map[string]struct{}
}

// maxHints bounds the memory kept for keys that are never used again.
const maxHints = 4096

func (p *parentHints) isPresent(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.present[key]
	return ok
}

func (p *parentHints) set(key string, present bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !present {
		delete(p.present, key)
		return
	}
	if len(p.present) >= maxHints {
		clear(p.present)
	}
	p.present[key] = struct{}{}
}

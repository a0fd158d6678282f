package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// What one node's round-1 reply told us about our lock write there.
const (
	writeUnknown  int8 = iota // no reply (timeout, connection error): it may have landed
	writeAcquired             // the node granted us the lock
	writeRefused              // SET NX found the key held: nothing of ours is there
)

// errHeldHere is a node's round-1 answer that someone else holds the key.
// It does not wrap lock.ErrNotAcquired: a joined list of node errors must not
// make an ErrUnavailable failure also match ErrNotAcquired.
var errHeldHere = errors.New("held by another lease")

// attempt is one try at the lock on every node, under a lease id of its own:
// a key left by an earlier, failed attempt can never be mistaken for this
// one's.
type attempt struct {
	l      *Locker
	key    string
	id     uuid.UUID
	ttl    time.Duration
	fenced bool
	// bg carries the caller's values but not its cancellation: a request
	// abandoned in flight may still run on the node, and only its reply says
	// whether there is a key to delete.
	bg    context.Context
	start time.Time

	// done[i] is closed once node i has answered, or timed out on, every
	// lock write this attempt sent it; write[i] is then final.
	done  []chan struct{}
	write []int8

	// Round 2 starts on each node that granted the lock once tokenReady is
	// closed (token is then set); abort tells nodes waiting for it to stop.
	tokenReady chan struct{}
	abort      chan struct{}
	token      uint64
}

// reply is one node's answer in round 1 or 2.
type reply struct {
	node     int
	round    int
	ok       bool   // round 1: lock granted; round 2: counter raised
	answered bool   // the node replied (granted, held, refused): it is up
	fence    uint64 // round 1: the node's counter
	err      error  // why not ok
}

// outcome is a successful attempt.
type outcome struct {
	token    lock.Token
	deadline time.Time
}

func (l *Locker) newAttempt(ctx context.Context, key string, ttl time.Duration) *attempt {
	n := len(l.nodes)
	a := &attempt{
		l: l, key: key, id: uuid.New(), ttl: ttl, fenced: !l.cfg.noFencing,
		bg:         context.WithoutCancel(ctx),
		done:       make([]chan struct{}, n),
		write:      make([]int8, n),
		tokenReady: make(chan struct{}),
		abort:      make(chan struct{}),
	}
	for i := range a.done {
		a.done[i] = make(chan struct{})
	}
	return a
}

// run makes the attempt: round 1 and, with fencing, round 2, each returning
// as soon as a majority allows. On failure, or when ctx ends midway, it
// unlocks every node the attempt may have written before returning, so no
// key is left behind. Its errors are not prefixed; Acquire adds the key.
func (a *attempt) run(ctx context.Context) (outcome, error) {
	n, q := len(a.l.nodes), a.l.quorum
	replies := make(chan reply, 2*n) // at most two per node: nobody blocks
	a.start = time.Now()
	for i := range n {
		a.l.spawn(func() { a.node(i, replies) })
	}
	t := tally{reachable: make([]bool, n), r1Pending: n}
	for {
		var r reply
		select {
		case r = <-replies:
		case <-ctx.Done():
			return a.fail(replies, &t, ctx.Err())
		}
		t.add(a, r)
		if r.round == 1 && !t.decided {
			if t.granted >= q {
				if !a.fenced {
					return a.succeed(replies, &t, 0)
				}
				a.token = t.maxFence + 1
				close(a.tokenReady)
				t.decided, t.r2Pending = true, t.granted
			} else if t.granted+t.r1Pending < q {
				return a.fail(replies, &t, nil)
			}
			continue
		}
		if t.r2OK >= q {
			return a.succeed(replies, &t, lock.Token(a.token))
		}
		// A node still in round 1 may yet grant the lock and publish the token.
		if t.decided && t.r2OK+t.r2Pending+t.r1Pending < q {
			return a.fail(replies, &t, nil)
		}
	}
}

// tally is what the replies of one attempt have said so far.
type tally struct {
	r1Pending, granted int
	maxFence           uint64
	decided            bool
	r2OK, r2Pending    int
	reachable          []bool // answered round 1 and, if sent, round 2
	errs               []error
}

func (t *tally) add(a *attempt, r reply) {
	if r.err != nil {
		t.errs = append(t.errs, a.l.nodeErr(r.node, r.err))
	}
	t.reachable[r.node] = r.answered
	if r.round == 2 {
		t.r2Pending--
		if r.ok {
			t.r2OK++
		}
		return
	}
	t.r1Pending--
	if r.answered {
		t.maxFence = max(t.maxFence, r.fence)
	}
	if r.ok {
		t.granted++
		if t.decided {
			t.r2Pending++ // the node goes on to round 2 by itself
		}
	}
}

// err explains a failed attempt with every reply in: lock.ErrUnavailable when
// fewer than a majority of nodes answered at all, lock.ErrNotAcquired when
// they answered but the key was held (or, in round 2, a counter was ahead).
func (t *tally) err(a *attempt) error {
	n, q := len(a.l.nodes), a.l.quorum
	reachable := 0
	for _, ok := range t.reachable {
		if ok {
			reachable++
		}
	}
	errs := joinNodeErrs(t.errs)
	sentinel := lock.ErrNotAcquired
	if reachable < q {
		sentinel = fmt.Errorf("%w (%d/%d answered)", lock.ErrUnavailable, reachable, n)
	}
	if t.decided {
		return fmt.Errorf("token %d published on %d/%d nodes: %w: %w", a.token, t.r2OK, n, sentinel, errs)
	}
	return fmt.Errorf("no quorum (%d/%d): %w: %w", t.granted, n, sentinel, errs)
}

// succeed checks the lease's validity: the majority was reached after
// elapsed, and the first key a node set expires TTL after a.start by that
// node's clock, which may run up to drift ahead of ours.
func (a *attempt) succeed(replies <-chan reply, t *tally, token lock.Token) (outcome, error) {
	elapsed := time.Since(a.start)
	if validity := a.ttl - elapsed - retry.Drift(a.ttl); validity <= 0 {
		return a.fail(replies, t, fmt.Errorf("%w: quorum reached after %v, no validity left of a %v TTL",
			lock.ErrUnavailable, elapsed, a.ttl))
	}
	return outcome{token: token, deadline: a.start.Add(a.ttl - retry.Drift(a.ttl))}, nil
}

// fail unlocks what the attempt may hold and returns cause, or (when nil)
// the explanation the replies give. Since the unlock waits for every node's
// replies, the explanation counts them all, not just those in when the
// attempt gave up.
func (a *attempt) fail(replies <-chan reply, t *tally, cause error) (outcome, error) {
	close(a.abort)
	_ = a.release(true)
	if cause != nil {
		return outcome{}, cause
	}
	for {
		select {
		case r := <-replies:
			t.add(a, r)
		default:
			return outcome{}, t.err(a)
		}
	}
}

// node runs this attempt's lock writes on node i, in order: round 1, then
// round 2 if the node granted the lock and the token gets decided.
func (a *attempt) node(i int, replies chan<- reply) {
	defer close(a.done[i])
	nd := a.l.nodes[i]
	r := reply{node: i, round: 1}
	var err error
	if a.fenced {
		r.ok, r.fence, err = nd.AcquireRead(a.bg, a.key, a.id.String(), a.ttl)
	} else {
		r.ok, err = nd.SetNX(a.bg, a.key, a.id.String(), a.ttl)
	}
	switch {
	case err != nil:
		r.err = err
		a.write[i] = writeUnknown
	case r.ok:
		r.answered = true
		a.write[i] = writeAcquired
	default:
		r.answered, r.err = true, errHeldHere
		a.write[i] = writeRefused
	}
	replies <- r
	if !r.ok || !a.fenced {
		return
	}
	select {
	case <-a.tokenReady:
	case <-a.abort:
		return
	}
	err = nd.Fence(a.bg, a.key, a.id.String(), a.token)
	replies <- reply{
		node: i, round: 2, ok: err == nil, err: err,
		answered: err == nil || errors.Is(err, redisnode.ErrNotHeld) || errors.Is(err, redisnode.ErrFenceAhead),
	}
}

// release compare-and-deletes this attempt's key on every node it may have
// written: all but those that answered that SET NX found the key held.
// Each node's delete waits for that node's lock writes to be answered first.
// With wait it returns when every delete has finished; otherwise once a
// majority of nodes is clear of our key (the rest finish in the background).
// It returns the errors of the deletes it waited for, when fewer than that
// majority could be confirmed.
func (a *attempt) release(wait bool) error {
	n := len(a.l.nodes)
	results := a.l.each(allNodes(n), func(i int) error {
		<-a.done[i]
		if a.write[i] == writeRefused {
			return nil
		}
		_, err := a.l.nodes[i].Release(a.bg, a.key, a.id.String(), i == a.l.wakeNode(a.key))
		return err
	})
	cleared, pending := 0, n
	var errs []error
	for pending > 0 && (wait || cleared < a.l.quorum) {
		r := <-results
		pending--
		if r.err != nil {
			errs = append(errs, a.l.nodeErr(r.node, r.err))
			// Debug: with a node down, every release fails there.
			a.l.cfg.log.Debug("redlock: release", "key", a.key, "node", a.l.nodes[r.node].Addr(), "err", r.err)
			continue
		}
		cleared++
	}
	if cleared < a.l.quorum {
		return fmt.Errorf("released on %d/%d nodes: %w: %w", cleared, n, lock.ErrUnavailable, joinNodeErrs(errs))
	}
	return nil
}

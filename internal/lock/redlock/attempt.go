package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// What one node's round-1 reply told us about our lock write of one key there.
const (
	writeUnknown  int8 = iota // no reply (timeout, broken connection): it may have landed, or land later
	writeAcquired             // the node granted us the lock
	writeRefused              // SET NX found the key held: nothing of ours is there
	writeUnsent               // the request never reached the node (no connection): nothing of ours is there
)

// errHeldHere is a node's round-1 answer that someone else holds the key.
// It does not wrap lock.ErrNotAcquired: a joined list of node errors must not
// make an ErrUnavailable failure also match ErrNotAcquired.
var errHeldHere = errors.New("held by another lease")

// attempt is one try at the locks of one or more keys on every node, each
// key under a lease id of its own (a key left by an earlier, failed attempt
// can never be mistaken for this one's, and each lease is as if acquired
// alone). Every round sends one request per node carrying all the keys.
type attempt struct {
	l      *Locker
	keys   []string
	ids    []uuid.UUID
	holds  []redisnode.Hold // keys[k] under ids[k]
	ttl    time.Duration
	fenced bool
	// bg carries the caller's values but not its cancellation: a request
	// abandoned in flight may still run on the node, and only its reply says
	// whether there is a key to delete.
	bg    context.Context
	start time.Time

	// done[i] is closed once node i has answered, or timed out on, round 1,
	// the only lock write an attempt sends; wrote(i, k) is then final.
	done  []chan struct{}
	write []int8 // [i*len(keys)+k]: see wrote
	// fin[i] is closed once this attempt has nothing more to send to node
	// i (round 2, or the lesson of a token decided without it, included).
	fin []chan struct{}

	// Round 2 starts on each node that answered round 1 once tokenReady is
	// closed (tokens is then set: the token of each key won, 0 for the
	// others; oneRound marks the keys obtained in round 1, r2Keys the others
	// won, r2 the call that publishes their tokens, or r2Err why it could not
	// be built); abort tells nodes waiting for it to stop.
	tokenReady chan struct{}
	abort      chan struct{}
	tokens     []uint64
	oneRound   []bool
	r2Keys     []int
	r2         redisnode.Call
	r2Err      error
	// r1 is round 1's call with fencing, the same for every node.
	r1 redisnode.Call
}

// wrote is what node i's round-1 reply said of our lock write of key k;
// final once done[i] is closed.
func (a *attempt) wrote(i, k int) int8 { return a.write[i*len(a.keys)+k] }

// reply is one node's answer in round 1 or 2.
type reply struct {
	node     int
	round    int
	answered bool              // the node replied: it is up
	grants   []redisnode.Grant // round 1, per key: granted us the lock, and the node's counter
	counted  []error           // round 2, per key of r2Keys: nil when the raise counts
	err      error             // the request failed
}

func (l *Locker) newAttempt(ctx context.Context, keys []string, ttl time.Duration) *attempt {
	n := len(l.nodes)
	a := &attempt{
		l: l, keys: keys, ids: make([]uuid.UUID, len(keys)), holds: make([]redisnode.Hold, len(keys)),
		ttl: ttl, fenced: !l.cfg.noFencing,
		bg:         context.WithoutCancel(ctx),
		done:       make([]chan struct{}, n),
		fin:        make([]chan struct{}, n),
		write:      make([]int8, n*len(keys)),
		tokenReady: make(chan struct{}),
		abort:      make(chan struct{}),
	}
	for k, key := range keys {
		a.ids[k] = uuid.New()
		a.holds[k] = redisnode.Hold{Key: key, ID: a.ids[k].String()}
	}
	if a.fenced {
		a.r1 = redisnode.AcquireCall(a.holds, ttl)
	}
	for i := range n {
		a.done[i] = make(chan struct{})
		a.fin[i] = make(chan struct{})
	}
	return a
}

// outcome is what an attempt obtained: per key whether it is ours, and the
// validity deadline they share.
type outcome struct {
	obtained []bool
	deadline time.Time
	t        *tally // every reply in, for the explanation of keys not obtained
}

// run makes the attempt: round 1 and, with fencing, round 2, each returning
// as soon as a majority has settled every key. Keys not obtained are
// unlocked on every node that may hold them (one request per node) before
// run returns, and on an error (ctx ended midway, no validity left)
// nothing is held. Its errors are not prefixed; callers add the keys.
func (a *attempt) run(ctx context.Context) (outcome, error) {
	n := len(a.l.nodes)
	replies := make(chan reply, 2*n) // at most two per node: nobody blocks
	a.start = time.Now()
	for i := range n {
		a.l.spawn(func() { a.node(i, replies) })
	}
	t := newTally(a)
	// Once ctx is done the attempt still runs to its majority, up to the
	// node timeout (what its requests wait for anyway): cut short, it
	// leaves writes whose answer is on its way, each a delete to confirm,
	// where a majority that answered is all a clean clean-up needs.
	done := ctx.Done()
	var late <-chan time.Time
	for !t.settled() {
		select {
		case r := <-replies:
			t.add(r)
		case <-done:
			done = nil
			tm := time.NewTimer(time.Until(a.start.Add(a.l.cfg.nodeTimeout)))
			defer tm.Stop()
			late = tm.C
		case <-late:
			return a.fail(ctx, replies, t, ctx.Err())
		}
	}
	if !t.anyObtained() {
		return a.keep(ctx, replies, t)
	}
	elapsed := time.Since(a.start)
	// The first key a node set expires TTL after a.start by that node's
	// clock, which may run up to drift ahead of ours.
	if validity := a.ttl - elapsed - retry.Drift(a.ttl); validity <= 0 {
		return a.fail(ctx, replies, t, fmt.Errorf("%w: quorum reached after %v, no validity left of a %v TTL",
			lock.ErrUnavailable, elapsed, a.ttl))
	}
	return a.keep(ctx, replies, t)
}

// keep unlocks the keys not obtained and returns the outcome.
func (a *attempt) keep(ctx context.Context, replies <-chan reply, t *tally) (outcome, error) {
	var lost []held
	obtained := make([]bool, len(a.keys))
	for k := range a.keys {
		if obtained[k] = t.keys[k].obtained; !obtained[k] {
			lost = append(lost, held{a: a, k: k, quiet: a.heldElsewhere(k)})
		}
	}
	none := len(lost) == len(a.keys)
	if none {
		close(a.abort)
	}
	if len(lost) > 0 {
		// With nothing obtained, wait for every node: the explanation then
		// counts all replies, and the caller hears of a clean-up not
		// confirmed (t.cleanup). With leases to hand out, return once a
		// majority is clear, as a lease's release does; the rest finish in
		// the background, and the keys are reported held, as they may look.
		until := clearMajority
		if none {
			until = allDeletes
		}
		rerr := a.l.release(ctx, lost, until)
		t.drain(replies)
		if none {
			t.cleanup = rerr
		} else if rerr != nil {
			a.l.cfg.log.Warn("redlock: clean-up of keys not obtained", "keys", len(lost), "err", rerr)
		}
	}
	return outcome{obtained: obtained, deadline: a.start.Add(a.ttl - retry.Drift(a.ttl)), t: t}, nil
}

// heldElsewhere reports whether a majority of nodes refused key k: others'
// values hold it there (a lease, or what attempts that split the vote left
// until their clean-up or TTL), so deleting this attempt's writes frees no
// majority. The holder's release is then the wake-up the key's waiters
// need; the clean-up must not be one: it would wake this Locker's own head
// of line (or another process'), whose next attempt meets the same
// majority, and so on, an attempt a round trip for as long as the key
// stays held. With fewer refusals the clean-up does wake: the key may be
// free now.
func (a *attempt) heldElsewhere(k int) bool {
	refused := 0
	for i := range a.l.nodes {
		select {
		case <-a.done[i]: // its writes are recorded: readable without a race
			if a.wrote(i, k) == writeRefused {
				refused++
			}
		default: // not answered yet: counts as not refused
		}
	}
	return refused >= a.l.quorum
}

// fail unlocks every key of the attempt and returns cause.
func (a *attempt) fail(ctx context.Context, replies <-chan reply, t *tally, cause error) (outcome, error) {
	close(a.abort)
	all := make([]held, len(a.keys))
	for k := range a.keys {
		all[k] = held{a: a, k: k, quiet: a.heldElsewhere(k)}
	}
	rerr := a.l.release(ctx, all, allDeletes)
	t.drain(replies)
	return outcome{}, cleanupPending(cause, rerr)
}

// cleanupPending is cause, joined by the error of the clean-up that
// followed it when that did not clear a majority: the keys may then stay
// held on the nodes that did not answer until their TTL, and the contract
// (lock.Locker) says so with lock.ErrCleanupPending. The clean-up's own
// lock.ErrUnavailable is not wrapped: cause says why the call failed.
func cleanupPending(cause, rerr error) error {
	switch {
	case rerr == nil:
		return cause
	case errors.Is(rerr, lock.ErrCleanupPending): // its text says so already
		return fmt.Errorf("%w (%w)", cause, pendingText(rerr.Error()))
	}
	return fmt.Errorf("%w (%w: %v)", cause, lock.ErrCleanupPending, rerr)
}

// pendingText is the text of a clean-up error that already says
// lock.ErrCleanupPending: it wraps that alone, not the rest of its chain.
type pendingText string

func (e pendingText) Error() string { return string(e) }
func (e pendingText) Unwrap() error { return lock.ErrCleanupPending }

// node runs this attempt's requests to node i, in order: round 1 (the lock
// writes), then, with fencing, round 2 once the tokens are decided.
func (a *attempt) node(i int, replies chan<- reply) {
	defer close(a.fin[i])
	nd := a.l.nodes[i]
	r := reply{node: i, round: 1}
	var err error
	if a.fenced {
		r.grants, err = nd.AcquireBump(a.bg, a.r1)
	} else {
		r.grants, err = nd.SetNX(a.bg, a.holds, a.ttl)
	}
	if err != nil {
		r.err = err // the writes stay writeUnknown: the SETs may have landed, or land later
		if redisnode.Unsent(err) {
			w := a.write[i*len(a.keys) : (i+1)*len(a.keys)]
			for k := range w {
				w[k] = writeUnsent
			}
		}
	} else {
		r.answered = true
		w := a.write[i*len(a.keys) : (i+1)*len(a.keys)]
		for k, g := range r.grants {
			w[k] = writeRefused
			if g.Acquired {
				w[k] = writeAcquired
			}
		}
	}
	close(a.done[i])
	replies <- r
	if err != nil || !a.fenced {
		return
	}
	select {
	case <-a.tokenReady:
	case <-a.abort:
		return
	}
	// Round 2 goes to every node that answered round 1, whether it granted
	// us the lock or not: a node that knows the token keeps the next
	// acquisition's token above it even after the nodes that granted us the
	// lock restart empty (see the package doc). Only a raise under our lock
	// counts towards the token's majority. The keys obtained in round 1 need
	// no round 2 where this node bumped the counter to the token; a node that
	// did not (it answered after the tokens were decided) is taught the
	// token the same way, uncounted.
	teach := a.teach(i, r.grants)
	if len(a.r2Keys) == 0 && len(teach) == 0 {
		return
	}
	var counted []error
	c, err := a.r2, a.r2Err
	if err == nil && len(teach) > 0 {
		c, err = a.fenceCall(append(slices.Clone(a.r2Keys), teach...))
	}
	if err == nil {
		counted, err = nd.Fence(a.bg, c)
	}
	replies <- reply{node: i, round: 2, answered: err == nil, counted: counted, err: err}
}

// teach returns the keys obtained in round 1 whose token node i's grants do
// not hold.
func (a *attempt) teach(i int, grants []redisnode.Grant) []int {
	var ks []int
	for k, b := range a.oneRound {
		if g := grants[k]; b && !(g.Bumped && g.Fence == a.tokens[k]) {
			ks = append(ks, k)
		}
	}
	return ks
}

// fenceCall is the round-2 call for keys ks, in that order.
func (a *attempt) fenceCall(ks []int) (redisnode.Call, error) {
	if len(ks) == len(a.keys) && slices.IsSorted(ks) { // every key, in order
		return redisnode.FenceCall(a.holds, a.tokens)
	}
	holds, tokens := make([]redisnode.Hold, 0, len(ks)), make([]uint64, 0, len(ks))
	for _, k := range ks {
		holds, tokens = append(holds, a.holds[k]), append(tokens, a.tokens[k])
	}
	return redisnode.FenceCall(holds, tokens)
}

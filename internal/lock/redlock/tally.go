package redlock

import (
	"fmt"
	"slices"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// tally is what the replies of one attempt have said so far, per node and
// per key. A key is settled once a majority decides it either way: in round
// 1 when a majority granted it (won) or can no longer grant it; a won key
// whose every reply so far bumped its counter to one value is obtained with
// that token at once; the others in round 2, when their token was raised
// under our lock on a majority (obtained) or can no longer be.
type tally struct {
	a    *attempt
	n, q int

	r1Pending  int
	r1Answered int  // round-1 replies that answered
	decided    bool // round 1 settled every key
	round2     bool // tokens published: nodes that answered round 1 run round 2
	keys       []keyTally
	nodes      []nodeTally
	errs       []error
	// cleanup is the error of the clean-up of an attempt that obtained
	// nothing (see keep): the caller's error must say so.
	cleanup error
}

// keyTally is what the replies said of one key. Per-key and per-node state
// live in one slice each, so that an attempt costs a couple of allocations
// whatever its size: a single-key attempt is the hot path of a hot SKU.
type keyTally struct {
	granted  int    // nodes that granted it in round 1
	maxFence uint64 // the largest counter read
	// bumped is the counter every round-1 reply so far incremented to under
	// our grant; uneven once a reply refused us, did not increment, or
	// reported another value: then the key needs round 2.
	bumped              uint64
	uneven              bool
	r2OK                int // nodes where the raise counted
	won, obtained, lost bool
	errs                []error // nodes that held it elsewhere, refused its token
	// holders counts round 1's refusals by the lease id that held the key
	// (nil until one): see why.
	holders []holderCount
}

// holderCount is how many nodes refused a key for one holder's lease id.
type holderCount struct {
	id    string
	nodes int
}

// refusedBy counts a refusal by holder id.
func (kt *keyTally) refusedBy(id string) {
	for j := range kt.holders {
		if kt.holders[j].id == id {
			kt.holders[j].nodes++
			return
		}
	}
	kt.holders = append(kt.holders, holderCount{id: id, nodes: 1})
}

// majorityHolder is the lease id that refused the key on q nodes or more
// (a lease, or an attempt that won), or "".
func (kt *keyTally) majorityHolder(q int) string {
	for _, h := range kt.holders {
		if h.id != "" && h.nodes >= q {
			return h.id
		}
	}
	return ""
}

// nodeTally is what the replies said of one node.
type nodeTally struct {
	reachable bool // answered round 1 and, if sent, round 2
	r2Waiting bool // in round 2, no reply yet
}

func newTally(a *attempt) *tally {
	n := len(a.l.nodes)
	return &tally{
		a: a, n: n, q: a.l.quorum, r1Pending: n,
		keys: make([]keyTally, len(a.keys)), nodes: make([]nodeTally, n),
	}
}

func (t *tally) add(r reply) {
	a := t.a
	if r.err != nil {
		t.errs = append(t.errs, a.l.nodeErr(r.node, r.err))
	}
	t.nodes[r.node].reachable = r.answered
	if r.round == 2 {
		t.nodes[r.node].r2Waiting = false
		if !r.answered {
			return
		}
		for j, k := range a.r2Keys {
			if err := r.counted[j]; err == nil {
				t.keys[k].r2OK++
			} else {
				t.keys[k].errs = append(t.keys[k].errs, a.l.nodeErr(r.node, err))
			}
		}
		return
	}
	t.r1Pending--
	if !r.answered {
		return
	}
	first := t.r1Answered == 0
	t.r1Answered++
	for k, g := range r.grants {
		kt := &t.keys[k]
		kt.maxFence = max(kt.maxFence, g.Fence) // 0 without fencing
		switch {
		case !g.Bumped || !first && g.Fence != kt.bumped:
			kt.uneven = true
		case first:
			kt.bumped = g.Fence
		}
		if g.Acquired {
			kt.granted++
		} else {
			kt.errs = append(kt.errs, a.l.nodeErr(r.node, errHeldHere))
			kt.refusedBy(g.Holder)
		}
	}
	if t.round2 {
		t.nodes[r.node].r2Waiting = true // the node goes on to round 2 by itself
	}
}

// settled reports whether every key is decided, deciding round 1 (and
// publishing the tokens) once every key's vote is in.
func (t *tally) settled() bool {
	if !t.decided {
		for _, kt := range t.keys {
			if kt.granted < t.q && kt.granted+t.r1Pending >= t.q {
				return false
			}
		}
		t.decide()
	}
	all := true
	for k := range t.keys {
		kt := &t.keys[k]
		if !kt.won || kt.obtained || kt.lost {
			continue
		}
		switch {
		case kt.r2OK >= t.q:
			kt.obtained = true
		case kt.r2OK+t.r2Possible(k) < t.q:
			kt.lost = true
		default:
			all = false
		}
	}
	return all
}

// decide ends round 1: keys granted by a majority are won, the rest lost.
// Without fencing the won keys are obtained. With it, a won key whose every
// reply so far (a majority at least) granted it and bumped its counter to
// the same value is obtained with that value as its token: those nodes
// learnt the token in round 1 (see the package doc). The other won keys'
// tokens (the largest counter read + 1) go to round 2.
func (t *tally) decide() {
	t.decided = true
	a := t.a
	a.tokens = make([]uint64, len(a.keys))
	a.oneRound = make([]bool, len(a.keys))
	won := false
	for k := range t.keys {
		kt := &t.keys[k]
		kt.won = kt.granted >= t.q
		won = won || kt.won
		switch {
		case !kt.won:
			kt.lost = true
		case !a.fenced:
			kt.obtained = true
		case !kt.uneven:
			a.tokens[k], a.oneRound[k], kt.obtained = kt.bumped, true, true
		default:
			a.tokens[k] = kt.maxFence + 1
			a.r2Keys = append(a.r2Keys, k)
		}
	}
	if !won || !a.fenced {
		return
	}
	defer close(a.tokenReady) // nodes go on to round 2, or to teach late nodes
	if len(a.r2Keys) == 0 {
		return
	}
	// Round 2's call, the same on every node, built once here rather than
	// by each node's goroutine.
	a.r2, a.r2Err = a.fenceCall(a.r2Keys)
	t.round2 = true
	for i := range t.nodes {
		// Nodes that answered round 1 by now; later ones join in add.
		t.nodes[i].r2Waiting = t.nodes[i].reachable
	}
}

// r2Possible is how many more nodes may yet count key k's token: nodes
// that granted it and are still in round 2, and nodes still in round 1.
func (t *tally) r2Possible(k int) int {
	p := t.r1Pending
	for i, nt := range t.nodes {
		if nt.r2Waiting && t.a.wrote(i, k) == writeAcquired {
			p++
		}
	}
	return p
}

func (t *tally) anyObtained() bool {
	for _, kt := range t.keys {
		if kt.obtained {
			return true
		}
	}
	return false
}

// drain adds the replies already in.
func (t *tally) drain(replies <-chan reply) {
	for {
		select {
		case r := <-replies:
			t.add(r)
		default:
			return
		}
	}
}

func (t *tally) answered() int {
	n := 0
	for _, nt := range t.nodes {
		if nt.reachable {
			n++
		}
	}
	return n
}

// unavailable is the error of an attempt that fewer than a majority of
// nodes answered, or nil.
func (t *tally) unavailable() error {
	if r := t.answered(); r < t.q {
		return cleanupPending(fmt.Errorf("no quorum: %w (%d/%d answered): %w", lock.ErrUnavailable, r, t.n, joinNodeErrs(slices.Clone(t.errs))), t.cleanup)
	}
	return nil
}

// err explains why key k was not obtained, with every reply in:
// lock.ErrUnavailable when fewer than a majority of nodes answered at all,
// lock.ErrNotAcquired when they answered but the key was held (or, in round
// 2, a counter was ahead); with lock.ErrCleanupPending when the clean-up
// of the attempt was not confirmed on every node.
func (t *tally) err(k int) error {
	return cleanupPending(t.why(k), t.cleanup)
}

func (t *tally) why(k int) error {
	a := t.a
	kt := &t.keys[k]
	errs := joinNodeErrs(append(slices.Clone(t.errs), kt.errs...))
	sentinel := lock.ErrNotAcquired
	if r := t.answered(); r < t.q {
		sentinel = fmt.Errorf("%w (%d/%d answered)", lock.ErrUnavailable, r, t.n)
	}
	if kt.won && a.fenced {
		return fmt.Errorf("token %d published on %d/%d nodes: %w: %w", a.tokens[k], kt.r2OK, t.n, sentinel, errs)
	}
	if kt.granted > 0 && a.l.split(a.keys[k], kt.majorityHolder(t.q)) {
		// Some nodes were ours: the votes split, or a holder's lock is
		// missing there, or the release that woke us is still landing on
		// the nodes that refused us. Possibly nobody holds the key, and
		// then no release will come to wake a waiter: a short pause
		// (retry.ErrSplit), not a wait. Unless one lease id refused us on
		// a majority in this attempt and the one before: that lease holds
		// the key, and its release is the wake-up to wait for (see split).
		return fmt.Errorf("no quorum (%d/%d): %w: %w: %w", kt.granted, t.n, sentinel, retry.ErrSplit, errs)
	}
	return fmt.Errorf("no quorum (%d/%d): %w: %w", kt.granted, t.n, sentinel, errs)
}

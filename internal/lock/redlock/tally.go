package redlock

import (
	"fmt"
	"slices"

	"github.com/stockguard/stockguard/internal/lock"
)

// tally is what the replies of one attempt have said so far, per node and
// per key. A key is settled once a majority decides it either way: in round
// 1 when a majority granted it (won) or can no longer grant it; in round 2
// when its token was raised under our lock on a majority (obtained) or can
// no longer be.
type tally struct {
	a    *attempt
	n, q int

	r1Pending int
	grantedOn [][]bool // [node][key]: granted us the lock in round 1
	granted   []int    // per key: nodes that granted it
	maxFence  []uint64 // per key: the largest counter read
	decided   bool     // round 1 settled every key
	won       []bool
	round2    bool   // tokens published: nodes that answered round 1 run round 2
	r2Waiting []bool // per node: in round 2, no reply yet
	r2OK      []int  // per key: nodes where the raise counted

	obtained, lost []bool
	reachable      []bool // answered round 1 and, if sent, round 2
	errs           []error
	keyErrs        [][]error // per key: nodes that held it elsewhere, refused its token
}

func newTally(a *attempt) *tally {
	n, k := len(a.l.nodes), len(a.keys)
	t := &tally{
		a: a, n: n, q: a.l.quorum, r1Pending: n,
		grantedOn: make([][]bool, n), granted: make([]int, k), maxFence: make([]uint64, k),
		won: make([]bool, k), r2Waiting: make([]bool, n), r2OK: make([]int, k),
		obtained: make([]bool, k), lost: make([]bool, k), reachable: make([]bool, n),
		keyErrs: make([][]error, k),
	}
	for i := range t.grantedOn {
		t.grantedOn[i] = make([]bool, k)
	}
	return t
}

func (t *tally) add(r reply) {
	a := t.a
	if r.err != nil {
		t.errs = append(t.errs, a.l.nodeErr(r.node, r.err))
	}
	t.reachable[r.node] = r.answered
	if r.round == 2 {
		t.r2Waiting[r.node] = false
		if !r.answered {
			return
		}
		j := 0
		for k, tok := range a.tokens {
			if tok == 0 {
				continue
			}
			if err := r.counted[j]; err == nil {
				t.r2OK[k]++
			} else {
				t.keyErrs[k] = append(t.keyErrs[k], a.l.nodeErr(r.node, err))
			}
			j++
		}
		return
	}
	t.r1Pending--
	if !r.answered {
		return
	}
	for k, ok := range r.granted {
		if r.fences != nil { // none without fencing
			t.maxFence[k] = max(t.maxFence[k], r.fences[k])
		}
		if ok {
			t.granted[k]++
			t.grantedOn[r.node][k] = true
		} else {
			t.keyErrs[k] = append(t.keyErrs[k], a.l.nodeErr(r.node, errHeldHere))
		}
	}
	if t.round2 {
		t.r2Waiting[r.node] = true // the node goes on to round 2 by itself
	}
}

// settled reports whether every key is decided, deciding round 1 (and
// publishing the tokens) once every key's vote is in.
func (t *tally) settled() bool {
	if !t.decided {
		for k := range t.a.keys {
			if t.granted[k] < t.q && t.granted[k]+t.r1Pending >= t.q {
				return false
			}
		}
		t.decide()
	}
	all := true
	for k := range t.a.keys {
		if !t.won[k] || t.obtained[k] || t.lost[k] {
			continue
		}
		switch {
		case t.r2OK[k] >= t.q:
			t.obtained[k] = true
		case t.r2OK[k]+t.r2Possible(k) < t.q:
			t.lost[k] = true
		default:
			all = false
		}
	}
	return all
}

// decide ends round 1: keys granted by a majority are won, the rest lost.
// Without fencing the won keys are obtained; with it their tokens (the
// largest counter read + 1) go to round 2.
func (t *tally) decide() {
	t.decided = true
	a := t.a
	a.tokens = make([]uint64, len(a.keys))
	any := false
	for k := range a.keys {
		t.won[k] = t.granted[k] >= t.q
		switch {
		case !t.won[k]:
			t.lost[k] = true
		case !a.fenced:
			t.obtained[k] = true
		default:
			a.tokens[k] = t.maxFence[k] + 1
			any = true
		}
	}
	if !any {
		return
	}
	t.round2 = true
	for i := range t.n {
		// Nodes that answered round 1 by now; later ones join in add.
		t.r2Waiting[i] = t.reachable[i]
	}
	close(a.tokenReady)
}

// r2Possible is how many more nodes may yet count key k's token: nodes
// that granted it and are still in round 2, and nodes still in round 1.
func (t *tally) r2Possible(k int) int {
	p := t.r1Pending
	for i := range t.n {
		if t.r2Waiting[i] && t.grantedOn[i][k] {
			p++
		}
	}
	return p
}

func (t *tally) anyObtained() bool { return slices.Contains(t.obtained, true) }

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
	for _, ok := range t.reachable {
		if ok {
			n++
		}
	}
	return n
}

// unavailable is the error of an attempt that fewer than a majority of
// nodes answered, or nil.
func (t *tally) unavailable() error {
	if r := t.answered(); r < t.q {
		return fmt.Errorf("no quorum: %w (%d/%d answered): %w", lock.ErrUnavailable, r, t.n, joinNodeErrs(slices.Clone(t.errs)))
	}
	return nil
}

// err explains why key k was not obtained, with every reply in:
// lock.ErrUnavailable when fewer than a majority of nodes answered at all,
// lock.ErrNotAcquired when they answered but the key was held (or, in round
// 2, a counter was ahead).
func (t *tally) err(k int) error {
	a := t.a
	errs := joinNodeErrs(append(slices.Clone(t.errs), t.keyErrs[k]...))
	sentinel := lock.ErrNotAcquired
	if r := t.answered(); r < t.q {
		sentinel = fmt.Errorf("%w (%d/%d answered)", lock.ErrUnavailable, r, t.n)
	}
	if t.won[k] && a.fenced {
		return fmt.Errorf("token %d published on %d/%d nodes: %w: %w", a.tokens[k], t.r2OK[k], t.n, sentinel, errs)
	}
	return fmt.Errorf("no quorum (%d/%d): %w: %w", t.granted[k], t.n, sentinel, errs)
}

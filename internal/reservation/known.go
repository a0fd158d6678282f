package reservation

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
)

// An order for a SKU that does not exist must never reach a lock server:
// taking its lock would leave counters, wake keys or znodes behind for a
// name a client made up, and a client can make up any number of them. So
// before any lock is taken the section drops the ops that name an unknown
// SKU (section.go, acquire). SKUs are never deleted, so a name once seen to
// exist is remembered and costs nothing again; the rest are looked up with
// one store call per acquisition, whatever the number of orders and lines
// waiting on it.

// maxKnownSKUs bounds the names a Service remembers as existing. A name is
// at most 64 bytes, so the set stays within about 10 MB. Past the bound no
// new name is remembered: those SKUs are looked up in every acquisition
// that names them, one statement each time, never a wrong answer.
const maxKnownSKUs = 100_000

// knownSKUs is the set of SKU names seen to exist.
type knownSKUs struct {
	store inventory.Store
	limit int

	mu    sync.Mutex
	names map[string]struct{}
}

func newKnownSKUs(store inventory.Store, limit int) *knownSKUs {
	return &knownSKUs{store: store, limit: limit, names: make(map[string]struct{})}
}

// add remembers that names exist, up to the bound.
func (k *knownSKUs) add(names ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, n := range names {
		if len(k.names) >= k.limit {
			return
		}
		k.names[n] = struct{}{}
	}
}

// misses returns those of names not remembered to exist: the ones unknown
// asks the store about.
func (k *knownSKUs) misses(names []string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ask []string
	for _, n := range names {
		if _, ok := k.names[n]; !ok {
			ask = append(ask, n)
		}
	}
	return ask
}

// unknown returns those of ask, names not remembered (misses), that do
// not exist, asking the store about them in one call.
func (k *knownSKUs) unknown(ctx context.Context, ask []string) (map[string]bool, error) {
	lctx, cancel := context.WithTimeout(ctx, storeTimeout)
	found, err := k.store.KnownSKUs(lctx, ask)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("reservation: look up skus: %w", err)
	}
	var known []string
	unknown := make(map[string]bool)
	for _, n := range ask {
		if found[n] {
			known = append(known, n)
		} else {
			unknown[n] = true
		}
	}
	k.add(known...)
	return unknown, nil
}

// dropUnknown answers, without locking anything, the ops of waiting that
// name a SKU that does not exist (unknown_sku), or every op with the
// lookup's error; it returns the rest and the SKUs they need. ask is
// s.known.misses(want). Ops that set stock (anySKU) are not checked:
// creating a SKU takes its lock like any other stock change, and a level
// set only over counters other than 0 finds it missing under the lease. The
// lookup lasts no longer than the last of waiting is willing to wait: past
// that each is answered as the store's fault (slowLookup), and nothing is
// locked for it. When that wait is over already (spent in a queue, behind
// another batch), the store is not asked: the lookup could only fail, and
// blame the database for a wait it had no part in. Each is answered as its
// own timer would answer it (waitedOut), and nothing is locked.
func (s *Service) dropUnknown(ctx context.Context, want []string, ask []string, waiting []*pending) ([]string, []*pending) {
	// An acquisition of SKUs all seen before (every one of a hot SKU's)
	// touches no order here.
	if len(ask) == 0 || slices.ContainsFunc(waiting, func(p *pending) bool { return p.op.anySKU }) {
		return want, waiting
	}
	deadline := waiting[0].deadline
	for _, p := range waiting {
		deadline = later(deadline, p.deadline)
	}
	if !time.Now().Before(deadline) {
		for _, p := range waiting {
			if p.move(stateQueued, stateDecided) {
				p.answer <- waitedOut(p, s.lockWait)
			}
		}
		return nil, nil
	}
	for _, p := range waiting {
		p.lookup.Store(true)
	}
	lctx, cancel := context.WithDeadline(ctx, deadline)
	unknown, err := s.known.unknown(lctx, ask)
	if ctx.Err() == nil && lctx.Err() != nil {
		err = slowLookup(s.lockWait) // the lock wait is over, whatever the answer
	}
	cancel()
	for _, p := range waiting {
		p.lookup.Store(false)
	}
	if err == nil && len(unknown) == 0 {
		return want, waiting
	}
	var rest []*pending
	want = nil
	for _, p := range waiting {
		ans := err
		if ans == nil {
			if i := slices.IndexFunc(p.op.skus, func(n string) bool { return unknown[n] }); i >= 0 {
				ans = &inventory.SKUError{SKU: p.op.skus[i], Err: inventory.ErrUnknownSKU}
			}
		}
		if ans == nil {
			rest, want = append(rest, p), mergeSorted(want, p.op.skus)
			continue
		}
		if p.move(stateQueued, stateDecided) {
			p.answer <- ans
		}
	}
	return want, rest
}

// slowLookup answers an order whose lock wait ran out while the store was
// still asked whether its SKUs exist: nothing was locked, and the wait was
// the database's. Calling it lock_unavailable would send whoever is on
// call to the lock servers (the alert on it says they are down).
func slowLookup(wait time.Duration) error {
	return fmt.Errorf("reservation: the database did not say within the lock wait (%s) whether the SKUs exist: %w",
		wait, inventory.ErrStoreUnavailable)
}

package reservation

import (
	"context"
	"fmt"
	"sync"

	"github.com/stockguard/stockguard/internal/inventory"
)

// Idempotency keys have one record: the order row that carries the key,
// inserted by the write that places the order. Nothing is reserved ahead of
// that write, so a keyed order costs no statement and no commit of its own
// outside its batch, and a process that dies mid-request leaves nothing to
// clean up. The unique index on the key is the arbiter across instances: of
// two requests with one key that both reach a write, the second write is
// refused with a *KeyTakenError and its request answered from the first.
//
// Around that, each instance keeps the keys of the requests it is running:
// a repeat while the first still runs here, of the same request or another,
// is refused at once as in flight, and no batch ever holds one key twice.
// Nothing is looked up before an order queues: a statement per order, even
// shared, cost more than the batch's write did (ZooKeeper's hot SKU went
// from 1,840 to 2,370 orders/s without it). A key is looked up only for a
// request that did not go through, where the order holding the key, if
// any, is the answer: a replay is refused by the write (*KeyTakenError), or
// by the ledger once the stock has gone. Lookups made while one is in
// flight share the next statement.
type keys struct {
	store inventory.Store

	mu sync.Mutex
	// running maps the keys of this instance's requests still in flight to
	// their request hashes.
	running map[string]string
	// waiting are lookups for the next statement; looking is set while a
	// goroutine runs statements for them.
	waiting []*keyLookup
	looking bool
}

type keyLookup struct {
	key    string
	answer chan keyAnswer // buffered: the looker never waits
}

type keyAnswer struct {
	order *inventory.Order
	err   error
}

// maxKeyLookup caps the keys of one lookup statement.
const maxKeyLookup = 512

func newKeys(store inventory.Store) *keys {
	return &keys{store: store, running: make(map[string]string)}
}

// enter marks key as running here for the request with this hash, and
// returns the function that ends that. A key already running here is
// refused as in flight, for another request too: the first may yet fail
// and free the key, so the other is not told the key is reused, which is
// final; only an order placed with the key can say that (replay).
func (k *keys) enter(key, hash string) (leave func(), err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if h, ok := k.running[key]; ok {
		if h != hash {
			return nil, fmt.Errorf("%w: the first request with this key, for another order, is still running", inventory.ErrIdempotencyInFlight)
		}
		return nil, fmt.Errorf("%w: the first request with this key is still running", inventory.ErrIdempotencyInFlight)
	}
	k.running[key] = hash
	return func() {
		k.mu.Lock()
		delete(k.running, key)
		k.mu.Unlock()
	}, nil
}

// find returns the order that holds key, or nil. Concurrent finds share one
// statement: the first runs at once, and those that arrive while it runs go
// together in the next, so the statements per second stay near the
// database's round-trip rate however many orders arrive.
func (k *keys) find(ctx context.Context, key string) (*inventory.Order, error) {
	l := &keyLookup{key: key, answer: make(chan keyAnswer, 1)}
	k.mu.Lock()
	k.waiting = append(k.waiting, l)
	start := !k.looking
	k.looking = true
	k.mu.Unlock()
	if start {
		// The looker serves every waiting request, not only this one.
		go k.look(context.WithoutCancel(ctx))
	}
	select {
	case a := <-l.answer:
		return a.order, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// look runs lookup statements until no lookup waits.
func (k *keys) look(ctx context.Context) {
	for {
		k.mu.Lock()
		n := min(len(k.waiting), maxKeyLookup)
		batch := k.waiting[:n:n]
		k.waiting = k.waiting[n:]
		if n == 0 {
			k.waiting = nil
			k.looking = false
		}
		k.mu.Unlock()
		if n == 0 {
			return
		}
		names := make([]string, n)
		for i, l := range batch {
			names[i] = l.key
		}
		lctx, cancel := context.WithTimeout(ctx, storeTimeout)
		found, err := k.store.OrdersByKey(lctx, names)
		cancel()
		for _, l := range batch {
			l.answer <- keyAnswer{found[l.key], err}
		}
	}
}

// replay is the answer to a request whose key o holds: the first answer, a
// reserved order, even if o has moved on since (GET shows where it stands
// now); or ErrIdempotencyReused if o was placed for another request.
func replay(o *inventory.Order, hash string) (*inventory.Order, error) {
	if o.RequestHash != hash {
		return nil, inventory.ErrIdempotencyReused
	}
	first := *o
	first.Status = inventory.StatusReserved
	return &first, nil
}

package reservation

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock/memlock"
)

// expiringStore lists the orders set in expired (one line each, of SKU
// "a") and fails every claim, so every expiry fails and the reaper backs off
// on it.
type expiringStore struct {
	inventory.Store

	mu      sync.Mutex
	expired []uuid.UUID
}

var errDown = errors.New("fake store: down")

func (s *expiringStore) ExpiredOrders(_ context.Context, _ time.Time, _ inventory.DueCursor, limit int, skip []uuid.UUID) ([]*inventory.Order, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*inventory.Order
	for _, id := range s.expired {
		if !slices.Contains(skip, id) && len(out) < limit {
			out = append(out, &inventory.Order{ID: id, Status: inventory.StatusReserved,
				Lines: []inventory.Line{{SKU: "a", Quantity: 1}}})
		}
	}
	return out, nil
}

func (s *expiringStore) KnownSKUs(_ context.Context, names []string) (map[string]bool, error) {
	known := make(map[string]bool, len(names))
	for _, n := range names {
		known[n] = true
	}
	return known, nil
}

func (s *expiringStore) Claim(context.Context, []inventory.Fence, bool) (map[string]inventory.SKU, error) {
	return nil, errDown
}

func ids(n int) []uuid.UUID {
	out := make([]uuid.UUID, n)
	for i := range out {
		out[i] = uuid.New()
	}
	return out
}

// TestReaperForgetsWhatLeft: failures are remembered while they back off,
// forgotten once the order is no longer listed, and never beyond the bound.
func TestReaperForgetsWhatLeft(t *testing.T) {
	st := &expiringStore{expired: ids(10)}
	now := time.Unix(1_700_000_000, 0)
	s := New(Config{Store: st, Locker: memlock.New(), Now: func() time.Time { return now }})
	r := reaper{s: s, interval: time.Second, limit: 4, failing: make(map[uuid.UUID]retry)}
	ctx := context.Background()
	r.once(ctx)
	if len(r.failing) != 4 {
		t.Fatalf("%d failures remembered after 10 failed, want the bound 4", len(r.failing))
	}
	r.limit = 100
	st.mu.Lock()
	st.expired = ids(6)
	st.mu.Unlock()
	now = now.Add(maxReapBackoff)
	r.once(ctx)
	if len(r.failing) != 6 {
		t.Fatalf("%d failures remembered, want the 6 still listed (the 4 gone are forgotten)", len(r.failing))
	}
	st.mu.Lock()
	st.expired = nil
	st.mu.Unlock()
	r.once(ctx) // none due yet: kept while they back off
	if len(r.failing) != 6 {
		t.Fatalf("%d failures remembered while backing off, want 6", len(r.failing))
	}
	now = now.Add(maxReapBackoff)
	r.once(ctx)
	if len(r.failing) != 0 {
		t.Fatalf("%d failures remembered for orders no longer listed, want 0", len(r.failing))
	}
}

package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// newStore opens a store on a fresh, migrated database of the local stack.
func newStore(t *testing.T, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	ctx := context.Background()
	url := stacktest.NewDatabase(t, ctx)
	s, err := postgres.Open(ctx, url, opts...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := postgres.Migrate(ctx, s.DB()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

func fence(sku string, token uint64) inventory.Fence {
	return inventory.Fence{SKU: sku, Token: token, Holder: uuid.New()}
}

// mustStock creates sku with n units available, as a PUT would.
func mustStock(t *testing.T, s *postgres.Store, sku string, n int64, token uint64) inventory.Fence {
	t.Helper()
	ctx := context.Background()
	f := fence(sku, token)
	got, err := s.Claim(ctx, []inventory.Fence{f}, true)
	if err != nil {
		t.Fatalf("claim %s: %v", sku, err)
	}
	k := got[sku]
	k.Received += n - k.Available
	k.Available = n
	if err := s.Write(ctx, []inventory.Fence{f}, inventory.Write{SKUs: []inventory.SKU{k}}); err != nil {
		t.Fatalf("write %s: %v", sku, err)
	}
	return f
}

func newOrder(sku string, qty int64, token uint64) *inventory.Order {
	now := time.Now()
	return &inventory.Order{ID: uuid.New(), Status: inventory.StatusReserved, RequestHash: "h", CreatedAt: now,
		ExpiresAt: now.Add(time.Hour), Lines: []inventory.Line{{SKU: sku, Quantity: qty, FenceToken: token}}}
}

// reserve is the service's critical section driven by hand: claim, decide, write.
func reserve(ctx context.Context, s *postgres.Store, f inventory.Fence, qty int64) error {
	got, err := s.Claim(ctx, []inventory.Fence{f}, false)
	if err != nil {
		return err
	}
	return s.Write(ctx, []inventory.Fence{f}, decide(got[f.SKU], qty, newOrder(f.SKU, qty, f.Token)))
}

func audit(t *testing.T, s *postgres.Store, sku string) inventory.Audit {
	t.Helper()
	a, err := s.Audit(context.Background(), sku)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	return a
}

func TestClaimRejectsOlderToken(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	mustStock(t, s, "sku-a", 10, 5)
	_, err := s.Claim(ctx, []inventory.Fence{fence("sku-a", 4)}, false)
	if !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("claim with an older token = %v, want ErrStaleFence", err)
	}
	// An equal token from another lease (a counter lost in a failover) is stale too.
	_, err = s.Claim(ctx, []inventory.Fence{fence("sku-a", 5)}, false)
	if !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("claim with an equal token of another lease = %v, want ErrStaleFence", err)
	}
	if _, err := s.Claim(ctx, []inventory.Fence{fence("nope", 9)}, false); !errors.Is(err, inventory.ErrUnknownSKU) {
		t.Fatalf("claim of an unknown sku = %v, want ErrUnknownSKU", err)
	}
}

// TestStaleClaimNamesBothTokens: a refused claim's error names the row's
// token and the lease's, what tells an operator a lease overtaken by the
// next from rows fenced by another backend's token space.
func TestStaleClaimNamesBothTokens(t *testing.T) {
	s := newStore(t)
	mustStock(t, s, "sku-a", 10, 77309790185)
	_, err := s.Claim(context.Background(), []inventory.Fence{fence("sku-a", 12)}, false)
	var ke *inventory.SKUError
	if !errors.Is(err, inventory.ErrStaleFence) || !errors.As(err, &ke) || ke.SKU != "sku-a" {
		t.Fatalf("claim with token 12 of a row fenced at 77309790185 = %v, want ErrStaleFence on sku-a", err)
	}
	if want := "row fence 77309790185, lease token 12"; !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not say %q", err, want)
	}
}

// TestResetFences: after ResetFences any lease claims every row, whatever
// token space fenced it; the counters and the order lines' tokens stay.
// FencedRows counts the rows claimed since, what tells migrate that a
// replica was left running.
func TestResetFences(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := mustStock(t, s, "sku-a", 10, 77309790185)
	claimed, err := s.Claim(ctx, []inventory.Fence{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	o := newOrder("sku-a", 3, f.Token)
	if err := s.Write(ctx, []inventory.Fence{f}, decide(claimed["sku-a"], 3, o)); err != nil {
		t.Fatal(err)
	}
	mustStock(t, s, "sku-b", 5, 9)
	if n, err := s.ResetFences(ctx); err != nil || n != 2 {
		t.Fatalf("ResetFences = %d, %v; want the 2 fenced rows", n, err)
	}
	if n, err := s.FencedRows(ctx); err != nil || n != 0 {
		t.Errorf("FencedRows right after the reset = %d, %v; want 0", n, err)
	}
	got, err := s.Claim(ctx, []inventory.Fence{fence("sku-a", 1), fence("sku-b", 1)}, false)
	if err != nil {
		t.Fatalf("claim with token 1 after the reset: %v", err)
	}
	if n, err := s.FencedRows(ctx); err != nil || n != 2 {
		t.Errorf("FencedRows after a lease claimed both rows = %d, %v; want 2", n, err)
	}
	if k := got["sku-a"]; k.Available != 7 || k.Reserved != 3 || k.FenceToken != 1 {
		t.Errorf("sku-a after the reset and a claim: %+v, want 7 available, 3 reserved, token 1", k)
	}
	if a := audit(t, s, "sku-a"); !a.Consistent || a.Held != 3 {
		t.Errorf("audit of sku-a after the reset: %+v", a)
	}
	if placed, err := s.Order(ctx, o.ID); err != nil || placed.Lines[0].FenceToken != f.Token {
		t.Errorf("order placed before the reset: %+v, %v; want its line's token %d kept", placed, err, f.Token)
	}
	if n, err := s.ResetFences(ctx); err != nil || n != 2 {
		t.Errorf("ResetFences again = %d, %v; want the 2 rows claimed since", n, err)
	}
	if n, err := s.ResetFences(ctx); err != nil || n != 0 {
		t.Errorf("ResetFences of reset rows = %d, %v; want 0", n, err)
	}
}

func TestStaleWriteLeavesNothingBehind(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	mustStock(t, s, "sku-a", 10, 1)
	mustStock(t, s, "sku-b", 10, 1)
	a, b := fence("sku-a", 2), fence("sku-b", 2)
	got, err := s.Claim(ctx, []inventory.Fence{a, b}, false)
	if err != nil {
		t.Fatal(err)
	}
	// A newer lease claims sku-b before our write: the two-line order must
	// fail as a whole, sku-a included.
	if _, err := s.Claim(ctx, []inventory.Fence{fence("sku-b", 3)}, false); err != nil {
		t.Fatal(err)
	}
	ka, kb := got["sku-a"], got["sku-b"]
	ka.Available, ka.Reserved = 9, 1
	kb.Available, kb.Reserved = 9, 1
	o := newOrder("sku-a", 1, 2)
	o.Lines = append(o.Lines, inventory.Line{SKU: "sku-b", Quantity: 1, FenceToken: 2})
	err = s.Write(ctx, []inventory.Fence{a, b}, inventory.Write{SKUs: []inventory.SKU{ka, kb}, Orders: []*inventory.Order{o}})
	var ke *inventory.SKUError
	if !errors.Is(err, inventory.ErrStaleFence) || !errors.As(err, &ke) || ke.SKU != "sku-b" {
		t.Fatalf("write = %v, want ErrStaleFence on sku-b", err)
	}
	if want := "row fence 3, lease token 2"; !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not say %q", err, want)
	}
	for _, sku := range []string{"sku-a", "sku-b"} {
		k, _ := s.SKU(ctx, sku)
		if k.Available != 10 || k.Reserved != 0 {
			t.Errorf("%s after the rolled-back write: %+v, want untouched", sku, k)
		}
	}
	if _, err := s.Order(ctx, o.ID); !errors.Is(err, inventory.ErrUnknownOrder) {
		t.Errorf("order of the failed write exists: %v", err)
	}
}

// TestStaleWriteNamesTheSameToken: a write whose row another lease claimed
// with the same token (a token source that lost its counter) says so, not
// "row fence 5, lease token 5", which reads as no refusal at all.
func TestStaleWriteNamesTheSameToken(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	mustStock(t, s, "sku-a", 10, 1)
	ours := fence("sku-a", 5)
	got, err := s.Claim(ctx, []inventory.Fence{ours}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE skus SET fence_holder = $1 WHERE sku = 'sku-a'`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	k := got["sku-a"]
	k.Available, k.Reserved = 9, 1
	err = s.Write(ctx, []inventory.Fence{ours}, inventory.Write{SKUs: []inventory.SKU{k}, Orders: []*inventory.Order{newOrder("sku-a", 1, 5)}})
	if want := "row fence 5, lease token 5, claimed by another lease with the same token"; !errors.Is(err, inventory.ErrStaleFence) ||
		!strings.Contains(err.Error(), want) {
		t.Errorf("write = %v, want ErrStaleFence saying %q", err, want)
	}
}

// TestPausedHolderBetweenClaimAndWrite is the fencing problem itself:
// holder A (token 2) claims and reads, then stalls; its lease expires and
// holder B (token 3) claims and reads; A wakes and writes, landing between
// B's read and B's write; then B writes. With fencing, A's write is rejected
// and B's stands. Without it both land and B overwrites A's reservation: one
// update is lost.
func TestPausedHolderBetweenClaimAndWrite(t *testing.T) {
	for _, fencing := range []bool{true, false} {
		name := map[bool]string{true: "fencing on", false: "fencing off"}[fencing]
		t.Run(name, func(t *testing.T) {
			s := newStore(t, postgres.WithFencing(fencing))
			ctx := context.Background()
			mustStock(t, s, "hot", 10, 1)
			a, b := fence("hot", 2), fence("hot", 3)

			readA, err := s.Claim(ctx, []inventory.Fence{a}, false)
			if err != nil {
				t.Fatal(err)
			}
			readB, err := s.Claim(ctx, []inventory.Fence{b}, false)
			if err != nil {
				t.Fatal(err)
			}
			errA := s.Write(ctx, []inventory.Fence{a}, decide(readA["hot"], 4, newOrder("hot", 4, a.Token)))
			errB := s.Write(ctx, []inventory.Fence{b}, decide(readB["hot"], 3, newOrder("hot", 3, b.Token)))

			got := audit(t, s, "hot")
			if fencing {
				if !errors.Is(errA, inventory.ErrStaleFence) {
					t.Fatalf("paused holder's write = %v, want ErrStaleFence", errA)
				}
				if errB != nil {
					t.Fatalf("new holder's write = %v", errB)
				}
				if !got.Consistent || got.Held != 3 || got.Available != 7 {
					t.Fatalf("audit = %+v, want consistent with 3 held", got)
				}
				return
			}
			if errA != nil || errB != nil {
				t.Fatalf("unfenced writes failed: %v, %v", errA, errB)
			}
			if got.Consistent || got.LostUnits != -4 {
				t.Fatalf("audit = %+v, want the paused holder's 4 units lost (lost_units -4)", got)
			}
		})
	}
}

// decide reserves qty from what a claim returned.
func decide(k inventory.SKU, qty int64, o *inventory.Order) inventory.Write {
	k.Available -= qty
	k.Reserved += qty
	return inventory.Write{SKUs: []inventory.SKU{k}, Orders: []*inventory.Order{o}}
}

func TestTransitionIsConditional(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := mustStock(t, s, "sku-t", 5, 1)
	f.Token = 2
	if err := reserve(ctx, s, f, 2); err != nil {
		t.Fatal(err)
	}
	due, err := s.ExpiredOrders(ctx, time.Now().Add(2*time.Hour), inventory.DueCursor{}, 10, nil)
	if err != nil || len(due) != 1 || len(due[0].Lines) != 1 || due[0].Lines[0] != (inventory.Line{SKU: "sku-t", Quantity: 2, FenceToken: 2}) {
		t.Fatalf("ExpiredOrders = %+v, %v; want one, with its line", due, err)
	}
	ids := []uuid.UUID{due[0].ID}
	if skipped, err := s.ExpiredOrders(ctx, time.Now().Add(2*time.Hour), inventory.DueCursor{}, 10, ids); err != nil || len(skipped) != 0 {
		t.Fatalf("ExpiredOrders skipping the only one = %v, %v; want none", skipped, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			tok := uint64(3 + i)
			f := fence("sku-t", tok)
			got, err := s.Claim(ctx, []inventory.Fence{f}, false)
			if err != nil {
				errs[i] = err
				return
			}
			k := got["sku-t"]
			k.Reserved -= 2
			k.Available += 2
			errs[i] = s.Write(ctx, []inventory.Fence{f}, inventory.Write{SKUs: []inventory.SKU{k},
				Transitions: []inventory.Transition{{ID: ids[0], From: inventory.StatusReserved, To: inventory.StatusExpired}}})
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if !errors.Is(err, inventory.ErrInvalidTransition) && !errors.Is(err, inventory.ErrStaleFence) {
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d expirations succeeded, want exactly 1", ok)
	}
	if a := audit(t, s, "sku-t"); !a.Consistent || a.Available != 5 {
		t.Fatalf("audit after expiry = %+v", a)
	}
}

// TestKeyTakenByAnotherWrite: the key's record is the order the write
// inserts. A second write with the key, as from a duplicate that raced its
// first request from another instance, is refused as a whole with the key
// named, lands nothing (lines included), and the rest of its orders then
// write on the same fence.
func TestKeyTakenByAnotherWrite(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := mustStock(t, s, "sku-k", 10, 1)
	f.Token = 2
	got, err := s.Claim(ctx, []inventory.Fence{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	first := newOrder("sku-k", 1, 2)
	first.IdempotencyKey = "key-1"
	k := got["sku-k"]
	k.Available, k.Reserved = 9, 1
	if err := s.Write(ctx, []inventory.Fence{f}, inventory.Write{SKUs: []inventory.SKU{k}, Orders: []*inventory.Order{first}}); err != nil {
		t.Fatal(err)
	}
	found, err := s.OrdersByKey(ctx, []string{"key-1", "key-none"})
	if err != nil || len(found) != 1 || found["key-1"] == nil || found["key-1"].ID != first.ID ||
		len(found["key-1"].Lines) != 1 || found["key-1"].RequestHash != first.RequestHash {
		t.Fatalf("OrdersByKey = %+v, %v; want the first order alone", found, err)
	}

	dup, other := newOrder("sku-k", 1, 2), newOrder("sku-k", 2, 2)
	dup.IdempotencyKey, other.IdempotencyKey = "key-1", "key-2"
	k.Available, k.Reserved = 6, 4
	err = s.Write(ctx, []inventory.Fence{f}, inventory.Write{SKUs: []inventory.SKU{k}, Orders: []*inventory.Order{dup, other}})
	var taken *inventory.KeyTakenError
	if !errors.As(err, &taken) || len(taken.Keys) != 1 || taken.Keys[0] != "key-1" {
		t.Fatalf("write with a taken key = %v, want a KeyTakenError naming key-1", err)
	}
	if a := audit(t, s, "sku-k"); !a.Consistent || a.Held != 1 || a.Available != 9 {
		t.Fatalf("audit after the refused write = %+v", a)
	}
	k.Available, k.Reserved = 7, 3
	if err := s.Write(ctx, []inventory.Fence{f}, inventory.Write{SKUs: []inventory.SKU{k}, Orders: []*inventory.Order{other}}); err != nil {
		t.Fatalf("write of the rest: %v", err)
	}
	if a := audit(t, s, "sku-k"); !a.Consistent || a.Held != 3 || a.Available != 7 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestTransitionOfMovedOrder is the losing half of a race on one order,
// played in order: another holder expired it after our claim read its
// counters... or before it, so what we would write breaks a counter's CHECK.
// The refusal must still say why: the order moved, not that stock is short.
func TestTransitionOfMovedOrder(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := mustStock(t, s, "sku-m", 5, 1)
	f.Token = 2
	if err := reserve(ctx, s, f, 2); err != nil {
		t.Fatal(err)
	}
	due, err := s.ExpiredOrders(ctx, time.Now().Add(2*time.Hour), inventory.DueCursor{}, 10, nil)
	if err != nil || len(due) != 1 {
		t.Fatalf("ExpiredOrders = %v, %v", due, err)
	}
	ids := []uuid.UUID{due[0].ID}
	expire := func(tok uint64) error {
		f := fence("sku-m", tok)
		got, err := s.Claim(ctx, []inventory.Fence{f}, false)
		if err != nil {
			return err
		}
		k := got["sku-m"]
		k.Reserved -= 2 // -2 when the order was already expired
		k.Available += 2
		return s.Write(ctx, []inventory.Fence{f}, inventory.Write{SKUs: []inventory.SKU{k},
			Transitions: []inventory.Transition{{ID: ids[0], From: inventory.StatusReserved, To: inventory.StatusExpired}}})
	}
	if err := expire(3); err != nil {
		t.Fatalf("first expiry: %v", err)
	}
	if err := expire(4); !errors.Is(err, inventory.ErrInvalidTransition) {
		t.Fatalf("second expiry = %v, want ErrInvalidTransition", err)
	}
	if a := audit(t, s, "sku-m"); !a.Consistent || a.Available != 5 || a.Held != 0 {
		t.Fatalf("audit = %+v", a)
	}
}

// TestWriteMovesSeveralOrders: one write moves several orders; if any of
// them moved first, the write lands nothing and names every such order,
// and the others then move under the same fence.
func TestWriteMovesSeveralOrders(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := mustStock(t, s, "sku-v", 10, 1)
	f.Token = 2
	for range 3 {
		if err := reserve(ctx, s, f, 1); err != nil {
			t.Fatal(err)
		}
	}
	due, err := s.ExpiredOrders(ctx, time.Now().Add(2*time.Hour), inventory.DueCursor{}, 10, nil)
	if err != nil || len(due) != 3 {
		t.Fatalf("ExpiredOrders = %v, %v; want three", due, err)
	}
	f.Token = 3
	got, err := s.Claim(ctx, []inventory.Fence{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	k := got["sku-v"]
	move := func(k inventory.SKU, to inventory.Status, orders ...*inventory.Order) error {
		w := inventory.Write{SKUs: []inventory.SKU{k}}
		for _, o := range orders {
			w.Transitions = append(w.Transitions, inventory.Transition{ID: o.ID, From: inventory.StatusReserved, To: to})
		}
		return s.Write(ctx, []inventory.Fence{f}, w)
	}
	k.Reserved, k.Sold = 2, 1
	if err := move(k, inventory.StatusConfirmed, due[1]); err != nil {
		t.Fatalf("confirm one: %v", err)
	}
	k.Reserved, k.Available = 0, 11 // would be 9 + 2, had the confirmed one been reserved still
	err = move(k, inventory.StatusExpired, due...)
	var oe *inventory.OrderError
	var te *inventory.TransitionError
	if !errors.As(err, &oe) || oe.ID != due[1].ID || !errors.As(err, &te) || te.From != inventory.StatusConfirmed ||
		!errors.Is(err, inventory.ErrInvalidTransition) || len(joined(err)) != 1 {
		t.Fatalf("moving three, one confirmed already = %v; want the confirmed one alone named", err)
	}
	if a := audit(t, s, "sku-v"); !a.Consistent || a.Held != 2 || a.Sold != 1 {
		t.Fatalf("audit after the refused write = %+v, want nothing of it landed", a)
	}
	k.Available = 9
	if err := move(k, inventory.StatusExpired, due[0], due[2]); err != nil {
		t.Fatalf("moving the other two: %v", err)
	}
	if a := audit(t, s, "sku-v"); !a.Consistent || a.Held != 0 || a.Sold != 1 || a.Available != 9 {
		t.Fatalf("audit = %+v", a)
	}
	if err := move(k, inventory.StatusExpired, due[0], due[0]); err == nil || errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("one order moved twice in a write = %v, want it refused as such", err)
	}
}

// joined returns the errors err joins, or err alone.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestWriteBatchOfOrders: several orders in one write, all or none.
func TestWriteBatchOfOrders(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := mustStock(t, s, "sku-w", 10, 1)
	f.Token = 2
	got, err := s.Claim(ctx, []inventory.Fence{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	k := got["sku-w"]
	o1, o2, o3 := newOrder("sku-w", 1, 2), newOrder("sku-w", 2, 2), newOrder("sku-w", 3, 2)
	o2.IdempotencyKey = "kw"
	k.Available, k.Reserved = 4, 6
	w := inventory.Write{SKUs: []inventory.SKU{k}, Orders: []*inventory.Order{o1, o2, o3}}
	// A newer holder in between: nothing of the batch may land.
	if _, err := s.Claim(ctx, []inventory.Fence{fence("sku-w", 3)}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []inventory.Fence{f}, w); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("stale batch write = %v, want ErrStaleFence", err)
	}
	if a := audit(t, s, "sku-w"); a.Held != 0 || a.Available != 10 {
		t.Fatalf("audit after the refused batch = %+v", a)
	}
	f = fence("sku-w", 4)
	if _, err := s.Claim(ctx, []inventory.Fence{f}, false); err != nil {
		t.Fatal(err)
	}
	for _, o := range w.Orders {
		o.Lines[0].FenceToken = f.Token
	}
	if err := s.Write(ctx, []inventory.Fence{f}, w); err != nil {
		t.Fatalf("batch write: %v", err)
	}
	if a := audit(t, s, "sku-w"); !a.Consistent || a.Held != 6 || a.Available != 4 {
		t.Fatalf("audit = %+v", a)
	}
	for _, o := range w.Orders {
		got, err := s.Order(ctx, o.ID)
		if err != nil || got.Status != inventory.StatusReserved || got.Lines[0].FenceToken != 4 || got.IdempotencyKey != o.IdempotencyKey {
			t.Fatalf("order %s = %+v, %v", o.ID, got, err)
		}
	}
	// Orders without a key have none in the row (NULL: the unique index
	// allows any number), not an empty one.
	var keyless int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1) AND idempotency_key IS NULL`,
		"{"+o1.ID.String()+","+o3.ID.String()+"}").Scan(&keyless); err != nil || keyless != 2 {
		t.Fatalf("%d of the 2 orders without a key have a NULL key (%v)", keyless, err)
	}
}

// TestSharedKeysInOppositeOrders: two batches on different SKUs (so under
// different leases, as from two instances) carry the same idempotency keys
// in opposite orders. A write waits on a key the other inserted and has not
// committed; were the keys inserted as they came, each would wait on the
// other and Postgres would abort one with a deadlock, failing its whole
// batch. One must place its orders and the other be refused with the keys
// named, in every round.
func TestSharedKeysInOppositeOrders(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const rounds, n = 10, 200
	for round := range rounds {
		fences := []inventory.Fence{
			mustStock(t, s, fmt.Sprintf("up-%d", round), n, 1),
			mustStock(t, s, fmt.Sprintf("down-%d", round), n, 1),
		}
		keys := make([][]string, 2)
		for i := range n {
			k := fmt.Sprintf("r%d-k%03d", round, i)
			keys[0] = append(keys[0], k)
			keys[1] = append([]string{k}, keys[1]...)
		}
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, f := range fences {
			wg.Go(func() {
				<-start
				errs[i] = placeKeyed(ctx, s, f, keys[i])
			})
		}
		close(start)
		wg.Wait()
		placed, refused := 0, 0
		for _, err := range errs {
			var taken *inventory.KeyTakenError
			switch {
			case err == nil:
				placed++
			case errors.As(err, &taken) && len(taken.Keys) == n:
				refused++
			default:
				t.Errorf("round %d: write = %v, want success or a KeyTakenError naming all %d keys", round, err, n)
			}
		}
		if placed != 1 || refused != 1 {
			t.Fatalf("round %d: %d writes placed, %d refused; want one each", round, placed, refused)
		}
	}
}

// placeKeyed claims f's SKU and writes one order of one unit per key.
func placeKeyed(ctx context.Context, s *postgres.Store, f inventory.Fence, keys []string) error {
	got, err := s.Claim(ctx, []inventory.Fence{f}, false)
	if err != nil {
		return err
	}
	k := got[f.SKU]
	w := inventory.Write{}
	for _, key := range keys {
		o := newOrder(f.SKU, 1, f.Token)
		o.IdempotencyKey = key
		w.Orders = append(w.Orders, o)
		k.Available--
		k.Reserved++
	}
	w.SKUs = []inventory.SKU{k}
	return s.Write(ctx, []inventory.Fence{f}, w)
}

package run

import (
	"encoding/json"

	"github.com/stockguard/stockguard/loadtest/client"
	"slices"
	"sort"
	"testing"
)

// kinds returns the sorted disagreement kinds of a check.
func kinds(ds []Disagreement) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Kind)
	}
	sort.Strings(out)
	return out
}

func auditOf(received, held, sold, available int64) client.Audit {
	over := max(0, held+sold-received)
	lost := received - held - sold - available
	return client.Audit{Received: received, Held: held, Sold: sold, Available: available, Oversold: over, LostUnits: lost, Consistent: over == 0 && lost == 0}
}

func TestCheckSKU(t *testing.T) {
	tests := []struct {
		name         string
		stock        int64
		ledger       int64
		unresolved   int64
		maxToken     uint64
		audit        client.Audit
		counters     client.SKUState
		wantOversold int64
		wantLost     int64
		wantKinds    []string
	}{
		{
			name: "clean", stock: 100, ledger: 60, maxToken: 7,
			audit:    auditOf(100, 60, 0, 40),
			counters: client.SKUState{Available: 40, Reserved: 60, Received: 100, FenceToken: 9},
		},
		{
			// Two orders of 1 read available=10 and both wrote 9: order lines
			// hold 2, the counters 1.
			name: "lost update", stock: 10, ledger: 2,
			audit:     auditOf(10, 2, 0, 9),
			counters:  client.SKUState{Available: 9, Reserved: 1, Received: 10},
			wantLost:  1,
			wantKinds: []string{"audit_vs_counters_held", "counters_vs_ledger"},
		},
		{
			// Counters look perfect, order lines and the ledger hold 12 of 10.
			name: "oversold with lost updates", stock: 10, ledger: 12,
			audit:        auditOf(10, 12, 0, 0),
			counters:     client.SKUState{Available: 0, Reserved: 10, Received: 10},
			wantOversold: 2, wantLost: 2,
			wantKinds: []string{"audit_vs_counters_held", "counters_vs_ledger", "ledger_oversold"},
		},
		{
			// The service reserved units it never answered 201 for.
			name: "phantom reservation", stock: 50, ledger: 5,
			audit:     auditOf(50, 8, 0, 42),
			counters:  client.SKUState{Available: 42, Reserved: 8, Received: 50},
			wantLost:  3,
			wantKinds: []string{"audit_vs_ledger", "counters_vs_ledger"},
		},
		{
			name: "audit fields lie", stock: 10, ledger: 12,
			audit:        client.Audit{Received: 10, Held: 12, Available: 0, Oversold: 0, LostUnits: 0, Consistent: true},
			counters:     client.SKUState{Available: 0, Reserved: 12, Received: 12},
			wantOversold: 2, wantLost: 2,
			wantKinds: []string{"audit_consistent_field", "audit_lost_field", "audit_oversold_field", "audit_vs_counters_received",
				"ledger_oversold", "received_vs_stock"},
		},
		{
			name: "sold counts as taken", stock: 10, ledger: 6,
			audit:    auditOf(10, 2, 4, 4),
			counters: client.SKUState{Available: 4, Reserved: 2, Sold: 4, Received: 10},
		},
		{
			name: "fence token regressed", stock: 10, ledger: 1, maxToken: 50,
			audit:     auditOf(10, 1, 0, 9),
			counters:  client.SKUState{Available: 9, Reserved: 1, Received: 10, FenceToken: 49},
			wantKinds: []string{"fence_token_regressed"},
		},
		{
			name: "counters break their invariant", stock: 10, ledger: 3,
			audit:     auditOf(10, 3, 0, 7),
			counters:  client.SKUState{Available: 8, Reserved: 3, Received: 10},
			wantKinds: []string{"audit_vs_counters_available", "counters_invariant"},
		},
		{
			// Unknown outcomes of 5 units: the service may hold 20..25, and
			// holds 23 (orders of 3 units committed, unanswered).
			name: "inside the unresolved range", stock: 50, ledger: 20, unresolved: 5,
			audit:    auditOf(50, 23, 0, 27),
			counters: client.SKUState{Available: 27, Reserved: 23, Received: 50},
		},
		{
			name: "above the unresolved range", stock: 50, ledger: 20, unresolved: 5,
			audit:     auditOf(50, 27, 0, 23),
			counters:  client.SKUState{Available: 23, Reserved: 27, Received: 50},
			wantLost:  2,
			wantKinds: []string{"audit_vs_ledger", "counters_vs_ledger"},
		},
		{
			// Unknown outcomes never excuse holding less than the 201s promised.
			name: "below the ledger with unresolved orders", stock: 50, ledger: 20, unresolved: 5,
			audit:     auditOf(50, 20, 0, 30),
			counters:  client.SKUState{Available: 31, Reserved: 19, Received: 50},
			wantLost:  1,
			wantKinds: []string{"audit_vs_counters_available", "audit_vs_counters_held", "counters_vs_ledger"},
		},
		{
			name: "negative counter", stock: 0, ledger: 0,
			audit:     auditOf(0, 0, 0, 0),
			counters:  client.SKUState{Available: -1, Reserved: 1, Received: 0},
			wantLost:  1,
			wantKinds: []string{"audit_vs_counters_available", "audit_vs_counters_held", "counters_vs_ledger", "negative_counter"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkSKU("s", tt.stock, tt.ledger, tt.unresolved, tt.maxToken, tt.audit, tt.counters)
			if got.Oversold != tt.wantOversold || got.Lost != tt.wantLost {
				t.Errorf("oversold %d lost %d, want %d %d", got.Oversold, got.Lost, tt.wantOversold, tt.wantLost)
			}
			if k := kinds(got.Disagreements); !slices.Equal(k, tt.wantKinds) {
				t.Errorf("disagreements %v, want %v", k, tt.wantKinds)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	checks := []SKUCheck{
		checkSKU("a", 10, 12, 0, 0, auditOf(10, 12, 0, 0), client.SKUState{Reserved: 10, Received: 10}),
		checkSKU("b", 10, 2, 0, 0, auditOf(10, 2, 0, 9), client.SKUState{Available: 9, Reserved: 1, Received: 10}),
		checkSKU("c", 10, 3, 0, 0, auditOf(10, 3, 0, 7), client.SKUState{Available: 7, Reserved: 3, Received: 10}),
	}
	v := summarize(checks, 9, []Disagreement{{SKU: "a", Kind: "idempotency_violated"}})
	if v.Oversold != 2 || v.Lost != 3 {
		t.Errorf("oversold %d lost %d, want 2 3", v.Oversold, v.Lost)
	}
	if v.Safe() {
		t.Error("Safe() = true with damage")
	}
	if v.DisagreementCount != 1+3+2 {
		t.Errorf("disagreement count %d, want 6", v.DisagreementCount)
	}
	s := v.Sources
	if s.Ledger.Units != 17 || s.Ledger.Oversold != 2 || s.Ledger.Orders != 9 {
		t.Errorf("ledger totals %+v", s.Ledger)
	}
	if s.Audit.Held != 17 || s.Audit.Oversold != 2 || s.Audit.LostUnits != 3 || s.Audit.InconsistentSKUs != 2 {
		t.Errorf("audit totals %+v", s.Audit)
	}
	if s.Counters.Reserved != 14 || s.Counters.LostVsLedger != 3 {
		t.Errorf("counter totals %+v", s.Counters)
	}
	if got := VerdictText(v); got != "UNSAFE: 2 units oversold, 3 lost" {
		t.Errorf("verdict %q", got)
	}
	if got := VerdictText(Verification{DisagreementCount: 2}); got != "UNSAFE: 0 units oversold, 0 lost, but 2 disagreements between sources" {
		t.Errorf("disagreement-only verdict %q", got)
	}
	clean := summarize([]SKUCheck{checks[2]}, 1, nil)
	if !clean.Safe() || VerdictText(clean) != "safe: 0 oversold, 0 lost" {
		t.Errorf("clean: safe=%v verdict %q", clean.Safe(), VerdictText(clean))
	}
}

func TestSummarizeCapsListedDisagreements(t *testing.T) {
	var checks []SKUCheck
	for range 150 {
		checks = append(checks, checkSKU("x", 10, 2, 0, 0, auditOf(10, 2, 0, 9), client.SKUState{Available: 9, Reserved: 1, Received: 10}))
	}
	v := summarize(checks, 0, nil)
	if v.DisagreementCount != 300 || len(v.Disagreements) != maxListedDisagreements {
		t.Errorf("count %d listed %d", v.DisagreementCount, len(v.Disagreements))
	}
	var many []SKUCheck
	for i := range maxListedSKUs + 10 {
		c := checkSKU("x", 10, 1, 0, 0, auditOf(10, 1, 0, 9), client.SKUState{Available: 9, Reserved: 1, Received: 10})
		if i%100 == 0 {
			c = checks[0]
		}
		many = append(many, c)
	}
	v = summarize(many, 0, nil)
	if len(v.SKUs) != 11 || v.SKUsOmitted != maxListedSKUs-1 || v.Lost != 11 {
		t.Errorf("listed %d omitted %d lost %d", len(v.SKUs), v.SKUsOmitted, v.Lost)
	}
}

func TestReceipts(t *testing.T) {
	l := NewReceipts()
	req := client.OrderRequest{Lines: []client.OrderLine{{SKU: "a", Quantity: 2}, {SKU: "b", Quantity: 3}}}
	resp := func(id string, tok uint64) *client.OrderResponse {
		r := &client.OrderResponse{OrderID: id}
		r.Lines = append(r.Lines, struct {
			SKU        string `json:"sku"`
			Quantity   int    `json:"quantity"`
			FenceToken uint64 `json:"fence_token"`
		}{"a", 2, tok}, struct {
			SKU        string `json:"sku"`
			Quantity   int    `json:"quantity"`
			FenceToken uint64 `json:"fence_token"`
		}{"b", 3, tok})
		return r
	}
	l.Record("k1", req, resp("o1", 5))
	l.Record("k1", req, resp("o1", 5)) // a replay books nothing
	if l.Units("a") != 2 || l.Units("b") != 3 || l.Orders() != 1 || len(l.Problems()) != 0 {
		t.Fatalf("after replay: a=%d b=%d orders=%d problems=%v", l.Units("a"), l.Units("b"), l.Orders(), l.Problems())
	}
	// Same key, new order id: the service reserved twice for one key.
	l.Record("k1", req, resp("o2", 9))
	if l.Units("a") != 4 || l.Units("b") != 6 || l.MaxToken("b") != 9 || l.Orders() != 2 {
		t.Fatalf("after double reservation: a=%d b=%d maxToken(b)=%d orders=%d", l.Units("a"), l.Units("b"), l.MaxToken("b"), l.Orders())
	}
	if p := l.Problems(); len(p) != 1 || p[0].Kind != "idempotency_violated" {
		t.Fatalf("problems %v", p)
	}
	bad := resp("o3", 1)
	bad.Lines[1].Quantity = 1
	l.Record("k3", req, bad)
	if p := l.Problems(); len(p) != 2 || p[1].Kind != "response_lines_differ" {
		t.Fatalf("problems %v", p)
	}
	// Another key answered with k1's first order: two customers promised,
	// one order stored. Both promises count, and the answer is a problem.
	l.Record("k4", req, resp("o1", 5))
	if p := l.Problems(); len(p) != 3 || p[2].Kind != "order_id_shared" || l.Units("a") != 8 || l.Orders() != 3 {
		t.Fatalf("after a shared order id: a=%d orders=%d problems %v", l.Units("a"), l.Orders(), p)
	}
}

// TestReceiptsUnresolvedMarks: an order marked unresolved counts its units
// as possibly held until a later answer settles it, a 201 (booked) or a
// refusal (none held); marking twice counts once.
func TestReceiptsUnresolvedMarks(t *testing.T) {
	req := client.OrderRequest{Lines: []client.OrderLine{{SKU: "a", Quantity: 2}, {SKU: "b", Quantity: 1}}}
	rc := NewReceipts()
	rc.MarkUnresolved("k1", req)
	rc.MarkUnresolved("k1", req)
	rc.MarkUnresolved("k2", req)
	if n, a, b := rc.Unresolved(), rc.UnresolvedUnits("a"), rc.UnresolvedUnits("b"); n != 2 || a != 4 || b != 2 {
		t.Fatalf("two keys marked (one twice): %d orders, a %d, b %d; want 2, 4, 2", n, a, b)
	}
	rc.Refused("k1", req)
	resp := &client.OrderResponse{OrderID: "o2"}
	if err := json.Unmarshal([]byte(`{"lines":[{"sku":"a","quantity":2,"fence_token":5},{"sku":"b","quantity":1,"fence_token":6}]}`), resp); err != nil {
		t.Fatal(err)
	}
	rc.Record("k2", req, resp)
	if n, a, units := rc.Unresolved(), rc.UnresolvedUnits("a"), rc.Units("a"); n != 0 || a != 0 || units != 2 {
		t.Fatalf("one refused, one answered 201: %d unresolved, a %d unresolved units, %d booked; want 0, 0, 2", n, a, units)
	}
}

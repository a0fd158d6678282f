package run

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// TestResultJSONShape pins the keys `load run --json` promises.
func TestResultJSONShape(t *testing.T) {
	res := &Result{Backend: "redlock", Instances: 3, Fencing: "on", LatencyMs: tally.LatencySummary{P50: 1, P95: 2, P99: 3, Max: 4}}
	res.Orders.ErrorCodes = map[string]int{}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"":             {"backend", "instances", "fencing", "orders", "units", "throughput_per_s", "latency_ms", "seed", "duration_s", "verification", "workload", "verdict", "safe"},
		"orders":       {"sent", "reserved", "insufficient", "stale_fence", "lock_unavailable", "errors"},
		"units":        {"stock", "reserved", "oversold", "lost"},
		"latency_ms":   {"p50", "p95", "p99", "max"},
		"verification": {"oversold", "lost", "sources", "disagreements", "disagreement_count"},
	}
	for obj, keys := range want {
		node := m
		if obj != "" {
			var ok bool
			if node, ok = m[obj].(map[string]any); !ok {
				t.Fatalf("%q is not an object in %s", obj, b)
			}
		}
		for _, k := range keys {
			if _, ok := node[k]; !ok {
				t.Errorf("key %q missing from %q", k, obj)
			}
		}
	}
	if m["backend"] != "redlock" || m["instances"] != 3.0 || m["fencing"] != "on" {
		t.Errorf("values: %s", b)
	}
	if lat := m["latency_ms"].(map[string]any); lat["p99"] != 3.0 {
		t.Errorf("latency_ms.p99 = %v", lat["p99"])
	}
}

// TestPrintTableCountsUnlistedDisagreements: past the ten it prints, the
// table says how many more findings the JSON lists and how many were
// counted beyond its bound, not listed anywhere.
func TestPrintTableCountsUnlistedDisagreements(t *testing.T) {
	var checks []SKUCheck
	for i := range 500 {
		sku := fmt.Sprint("s", i)
		checks = append(checks, SKUCheck{SKU: sku, Audit: client.Audit{Consistent: true},
			Disagreements: []Disagreement{{SKU: sku, Kind: "audit_vs_counters_held", Detail: "audit held 1, counters reserved 0"}}})
	}
	res := &Result{Verification: summarize(checks, 0, nil), Orders: tally.OrderCounts{ErrorCodes: map[string]int{}}}
	var table bytes.Buffer
	res.PrintTable(&table)
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Verification struct {
			Count         int            `json:"disagreement_count"`
			Disagreements []Disagreement `json:"disagreements"`
		} `json:"verification"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	listed := len(m.Verification.Disagreements)
	want := fmt.Sprintf("  … %d more in the JSON, %d more counted but not listed\n", listed-10, m.Verification.Count-listed)
	if listed != maxListedDisagreements || m.Verification.Count != 500 || !strings.HasSuffix(table.String(), want) {
		t.Fatalf("JSON: %d listed of %d; table ends:\n%s\nwant %q", listed, m.Verification.Count, table.String()[max(0, table.Len()-300):], want)
	}
}

// TestPrintTableLabelsFindingsOfAnInterruptedRun: an interrupted run whose
// same-key retry already contradicted its first answer lists that finding
// as seen before the stop, not verified, next to a "not verified" row that
// counts it; the run stays undamaged, as nothing was read back.
func TestPrintTableLabelsFindingsOfAnInterruptedRun(t *testing.T) {
	r := &Result{
		Verdict: "INTERRUPTED after 40 of 120 orders, while sending: not verified",
		Verification: Verification{Unverified: true, DisagreementCount: 1, Disagreements: []Disagreement{{
			SKU: "lt0-s00000", Kind: "retry_not_replayed",
			Detail: "key lt0-o0000028: first answer insufficient_stock (HTTP 409), same-key retry 201 01a2",
		}}},
	}
	r.Units.Unverified = true
	var b strings.Builder
	r.PrintTable(&b)
	out := b.String()
	for _, want := range []string{
		"disagreements  not verified; 1 seen before the stop  (retry_not_replayed=1)\n",
		"\n  seen before the stop (not verified): lt0-s00000 retry_not_replayed: key lt0-o0000028:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if r.Damaged() {
		t.Errorf("an interrupted run is damaged:\n%s", out)
	}
}

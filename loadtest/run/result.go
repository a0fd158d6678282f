package run

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stockguard/stockguard/loadtest/tally"
)

// WorkloadInfo records the workload of a run for the JSON and the report.
type WorkloadInfo struct {
	Mode        string  `json:"mode"` // "closed" (C clients) or "open" (fixed arrival rate)
	Orders      int     `json:"orders"`
	Concurrency int     `json:"concurrency"`
	RatePerS    float64 `json:"rate_per_s,omitempty"`
	Duration    string  `json:"duration,omitempty"`
	SKUs        int     `json:"skus"`
	Stock       int     `json:"stock"`
	Lines       Range   `json:"lines"`
	Qty         Range   `json:"qty"`
	Zipf        float64 `json:"zipf"`
	RetryShare  float64 `json:"retry_share"`
	HoldSeconds int     `json:"hold_seconds"`
}

// Result is everything a run measured and verified. Its JSON form is the
// contract of `load run --json`.
type Result struct {
	Label     string   `json:"label,omitempty"`
	Backend   string   `json:"backend"`
	Instances int      `json:"instances"`
	Fencing   string   `json:"fencing"`
	URLs      []string `json:"urls"`
	RunID     string   `json:"run_id"`
	Seed      uint64   `json:"seed"`

	StartedAt time.Time         `json:"started_at"`
	DurationS float64           `json:"duration_s"`
	TimedOut  bool              `json:"timed_out"`
	Workload  WorkloadInfo      `json:"workload"`
	Orders    tally.OrderCounts `json:"orders"`
	Units     tally.UnitCounts  `json:"units"`
	// ThroughputPerS is the orders sent a second of the sending phase,
	// whatever their answer; ReservedPerS the orders that got a 201 (to
	// their first attempt or their retry) within it, a second of it.
	// Orders.Reserved also counts those reconciliation found placed after
	// sending ended, outside the time divided by.
	ThroughputPerS  float64                 `json:"throughput_per_s"`
	ReservedPerS    float64                 `json:"reserved_per_s"`
	LatencyMs       tally.LatencySummary    `json:"latency_ms"`
	LatencyCurve    []tally.PercentilePoint `json:"latency_curve"`
	LatencyFrom     string                  `json:"latency_from"` // "send" (closed loop) or "intended_send" (open loop)
	Verification    Verification            `json:"verification"`
	Safe            bool                    `json:"safe"`
	Verdict         string                  `json:"verdict"`
	ExpectedUnsafe  bool                    `json:"expected_unsafe,omitempty"`
	VerifyFromURL   string                  `json:"verify_from_url"`
	GeneratorOrders int                     `json:"generated_orders"`
}

// Damaged reports whether anything was oversold or lost or any source
// disagrees. A result neither Safe nor Damaged was interrupted or is
// inconclusive: its verdict says which.
func (r *Result) Damaged() bool { return r.Verification.Damaged() }

// VerdictText is the plain-language verdict: "safe: 0 oversold, 0 lost",
// "UNSAFE: 37 units oversold, 12 lost", or "INCONCLUSIVE: …" when nothing
// was found but some orders' outcome stayed unknown, so that a run the
// service stopped answering is never called safe. Disagreements between
// the sources without unit damage still make a run unsafe and are named.
func VerdictText(v Verification) string {
	var s string
	switch {
	case v.Safe():
		return "safe: 0 oversold, 0 lost"
	case !v.Damaged():
		return fmt.Sprintf("INCONCLUSIVE: 0 oversold, 0 lost, but %d orders' outcome stayed unknown", v.Unresolved)
	case v.Oversold == 0 && v.Lost == 0:
		s = fmt.Sprintf("UNSAFE: 0 units oversold, 0 lost, but %d disagreements between sources", v.DisagreementCount)
	default:
		s = fmt.Sprintf("UNSAFE: %d units oversold, %d lost", v.Oversold, v.Lost)
	}
	if v.Unresolved > 0 {
		// The damage lies beyond what those orders could explain; they
		// are named so that no one reads the figures as complete.
		s += fmt.Sprintf(" (%d orders' outcome stayed unknown)", v.Unresolved)
	}
	return s
}

// PrintTable writes a human-readable summary of one run.
func (r *Result) PrintTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...)
	}
	name := r.Backend
	if name == "" {
		name = "(not given)"
	}
	row("backend", "%s  (fencing %s, %d instances)", name, orDash(r.Fencing), r.Instances)
	if r.Label != "" {
		row("label", "%s", r.Label)
	}
	row("run", "%s  seed %d  %s loop", r.RunID, r.Seed, r.Workload.Mode)
	row("duration", "%.2fs%s", r.DurationS, map[bool]string{true: "  (timed out: " + fmt.Sprint(r.Orders.Unsent) + " orders unsent)"}[r.TimedOut])
	o := r.Orders
	row("orders", "sent %d  reserved %d  insufficient %d  stale_fence %d  lock_unavailable %d  errors %d  (final outcomes)",
		o.Sent, o.Reserved, o.Insufficient, o.StaleFence, o.LockUnavailable, o.Errors)
	if len(o.ErrorCodes) > 0 {
		row("error codes", "%s", formatCodes(o.ErrorCodes))
	}
	if f := o.FirstAnswers; f != nil {
		row("first answers", "reserved %d  insufficient %d  stale_fence %d  lock_unavailable %d  errors %d",
			f.Reserved, f.Insufficient, f.StaleFence, f.LockUnavailable, f.Errors)
		if len(f.ErrorCodes) > 0 {
			row("  error codes", "%s", formatCodes(f.ErrorCodes))
		}
	}
	if o.Retries > 0 || o.Reconciled > 0 || o.Unresolved > 0 {
		row("retries", "%d same-key resends: %d replayed, %d mismatched, %d unsettled, %d settled; %d reconciled, %d unresolved",
			o.Retries, o.RetryReplayed, o.RetryMismatch, o.RetryUnsettled, o.RetrySettled, o.Reconciled, o.Unresolved)
	}
	row("throughput", "%.1f orders/s  (%.1f reserved/s)", r.ThroughputPerS, r.ReservedPerS)
	l := r.LatencyMs
	row("latency ms", "p50 %.2f  p95 %.2f  p99 %.2f  p99.9 %.2f  max %.2f  (from %s)", l.P50, l.P95, l.P99, l.P999, l.Max, r.LatencyFrom)
	s := r.Verification.Sources
	ledger := fmt.Sprintf("%d orders, %d units, oversold %d", s.Ledger.Orders, s.Ledger.Units, s.Ledger.Oversold)
	if s.Ledger.UnresolvedUnits > 0 {
		ledger += fmt.Sprintf("  (+ up to %d units of orders whose outcome stayed unknown)", s.Ledger.UnresolvedUnits)
	}
	if r.Verification.Unverified {
		// Nothing was read back: a 0 here would read as "nothing lost".
		row("units", "stock %d  reserved %d (receipts)  oversold not verified  lost not verified", r.Units.Stock, r.Units.Reserved)
		row("  ledger", "%s", ledger)
		row("  audit", "not read")
		row("  counters", "not read")
		// Findings from the answers alone (a retry contradicting its first
		// answer) were seen before the stop, but nothing was read back to
		// weigh them: they are listed as such and damage nothing.
		seen := ""
		if n := r.Verification.DisagreementCount; n > 0 {
			seen = fmt.Sprintf("; %d seen before the stop%s", n, summarizeKinds(r.Verification.Disagreements))
		}
		row("disagreements", "not verified%s", seen)
	} else {
		row("units", "stock %d  reserved %d  oversold %d  lost %d", r.Units.Stock, r.Units.Reserved, r.Units.Oversold, r.Units.Lost)
		row("  ledger", "%s", ledger)
		row("  audit", "received %d  held %d  sold %d  available %d  oversold %d  lost %d  inconsistent SKUs %d",
			s.Audit.Received, s.Audit.Held, s.Audit.Sold, s.Audit.Available, s.Audit.Oversold, s.Audit.LostUnits, s.Audit.InconsistentSKUs)
		row("  counters", "received %d  reserved %d  sold %d  available %d  reserved+sold outside the ledger's range by %d",
			s.Counters.Received, s.Counters.Reserved, s.Counters.Sold, s.Counters.Available, s.Counters.LostVsLedger)
		row("disagreements", "%d%s", r.Verification.DisagreementCount, summarizeKinds(r.Verification.Disagreements))
	}
	row("verdict", "%s", r.Verdict)
	_ = tw.Flush()
	listed := r.Verification.Disagreements
	shown := min(len(listed), 10)
	label := ""
	if r.Verification.Unverified {
		label = "seen before the stop (not verified): "
	}
	for _, d := range listed[:shown] {
		fmt.Fprintf(w, "  %s%s %s: %s\n", label, d.SKU, d.Kind, d.Detail)
	}
	// The JSON lists at most maxListedDisagreements; the count is exact.
	var more []string
	if n := len(listed) - shown; n > 0 {
		more = append(more, fmt.Sprintf("%d more in the JSON", n))
	}
	if n := r.Verification.DisagreementCount - len(listed); n > 0 {
		more = append(more, fmt.Sprintf("%d more counted but not listed", n))
	}
	if len(more) > 0 {
		fmt.Fprintf(w, "  … %s\n", strings.Join(more, ", "))
	}
}

func formatCodes(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += "  "
		}
		s += fmt.Sprintf("%s=%d", k, m[k])
	}
	return s
}

func summarizeKinds(ds []Disagreement) string {
	if len(ds) == 0 {
		return ""
	}
	m := map[string]int{}
	for _, d := range ds {
		m[d.Kind]++
	}
	return "  (" + formatCodes(m) + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

package bench

import (
	"fmt"
	"math"
	"slices"

	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// Workloads of the bench suite's end-to-end runs.
const (
	benchHot    = "hot"    // every order on one SKU: the lock hand-off is the limit
	benchSpread = "spread" // orders spread evenly over many SKUs: collisions are rare
)

// Run is one end-to-end run of the suite: one backend, one workload,
// coalescing on or off, condensed from its compare entry.
type Run struct {
	Backend        string  `json:"backend"`
	Round          int     `json:"round,omitempty"` // 1-based with --rounds > 1, else 0
	Workload       string  `json:"workload"`
	SKUs           int     `json:"skus"`
	Coalesce       string  `json:"coalesce"`
	Fencing        string  `json:"fencing"`
	ExpectedUnsafe bool    `json:"expected_unsafe"`
	LoadAvg1       float64 `json:"load_avg_1m"` // when the run started
	// Ran is false when the instances did not start or the run did not
	// complete (an interrupted run keeps its partial figures, outside the
	// ratios); Error says why.
	Ran   bool   `json:"ran"`
	Error string `json:"error,omitempty"`
	// Setup is how the instances were started (flags, environment; secrets
	// redacted).
	Setup *report.InstanceSetup `json:"setup,omitempty"`

	DurationS float64 `json:"duration_s"`
	// OrdersPerS is the orders sent a second of the run's sending phase,
	// whatever their answer (its throughput_per_s); ReservedPerS only those
	// placed within that phase (its reserved_per_s), the figure the ratios
	// use (a 503 is not a sale).
	OrdersPerS    float64              `json:"orders_per_s"`
	ReservedPerS  float64              `json:"reserved_per_s"`
	Orders        tally.OrderCounts    `json:"orders"`
	LatencyMs     tally.LatencySummary `json:"latency_ms"`
	Oversold      int64                `json:"oversold"`
	Lost          int64                `json:"lost"`
	Disagreements int                  `json:"disagreements"`
	Safe          bool                 `json:"safe"`
	Verdict       string               `json:"verdict"`
	PeakRSSMB     float64              `json:"peak_rss_mb"`
	InstanceRSSMB []float64            `json:"instance_peak_rss_mb,omitempty"`
	// Judge is the outside generator's attack on the same instances after
	// the run, with the CPU per order; nil when it did not run.
	Judge *Judged `json:"judge,omitempty"`
}

func (r Run) round() int { return r.Round }

// BackendRatios are one backend's ratios, all from the same suite run. A
// ratio is null when a run it needs did not complete or its denominator
// is zero.
type BackendRatios struct {
	Backend        string `json:"backend"`
	Round          int    `json:"round,omitempty"`
	ExpectedUnsafe bool   `json:"expected_unsafe"`

	// "Uncoalesced" is the service with --coalesce=off (a lease per
	// order), not the naive lock loops of JudgedRatios.
	HotCoalescedPerS         float64  `json:"hot_coalesced_per_s"`
	HotUncoalescedPerS       float64  `json:"hot_uncoalesced_per_s"`
	CoalescedOverUncoalesced *float64 `json:"coalesced_over_uncoalesced"`
	// CeilingPerS is the store-ceiling sample taken just before this
	// backend's hot-SKU runs.
	CeilingPerS          float64  `json:"ceiling_per_s"`
	CoalescedOverCeiling *float64 `json:"coalesced_over_ceiling"`

	P99CoalescedMs              float64  `json:"p99_coalesced_ms"`
	P99UncoalescedMs            float64  `json:"p99_uncoalesced_ms"`
	P99CoalescedOverUncoalesced *float64 `json:"p99_coalesced_over_uncoalesced"`

	SpreadCoalescedPerS            float64  `json:"spread_coalesced_per_s"`
	SpreadUncoalescedPerS          float64  `json:"spread_uncoalesced_per_s"`
	SpreadCoalescedOverUncoalesced *float64 `json:"spread_coalesced_over_uncoalesced"`

	// PeakRSSMB is the largest instance peak RSS over all the backend's runs.
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// Oversold and Lost sum the backend's runs.
	Oversold int64 `json:"oversold"`
	Lost     int64 `json:"lost"`
	// JudgedUnsafe is set when the store disagreed with a judged window's
	// answers (the readback): damage the runs' own figures do not count.
	JudgedUnsafe bool `json:"judged_unsafe,omitempty"`
	// Missing names the runs that did not complete ("hot/off").
	Missing []string `json:"missing,omitempty"`

	// Judged are the figures of the outside generator and the limits
	// measured next to the runs (issue 13's targets).
	Judged JudgedRatios `json:"judged"`
}

// benchRatios computes every backend's ratios from the runs, in the order
// of backends; ceilings maps a backend to the ceiling sample before its
// hot-SKU runs.
func benchRatios(backends []string, runs []Run, ceilings map[string]float64) []BackendRatios {
	var out []BackendRatios
	for _, b := range backends {
		r := BackendRatios{Backend: b, ExpectedUnsafe: compare.ExpectedUnsafe(b), CeilingPerS: ceilings[b]}
		find := func(workload, coalesce string) *Run {
			for i := range runs {
				x := &runs[i]
				if x.Backend == b && x.Workload == workload && x.Coalesce == coalesce {
					if x.Ran {
						return x
					}
					break
				}
			}
			r.Missing = append(r.Missing, workload+"/"+coalesce)
			return nil
		}
		hotOn, hotOff := find(benchHot, "on"), find(benchHot, "off")
		spreadOn, spreadOff := find(benchSpread, "on"), find(benchSpread, "off")
		if hotOn != nil {
			r.HotCoalescedPerS, r.P99CoalescedMs = hotOn.ReservedPerS, hotOn.LatencyMs.P99
			r.CoalescedOverCeiling = ratio(hotOn.ReservedPerS, r.CeilingPerS)
		}
		if hotOff != nil {
			r.HotUncoalescedPerS, r.P99UncoalescedMs = hotOff.ReservedPerS, hotOff.LatencyMs.P99
		}
		if hotOn != nil && hotOff != nil {
			r.CoalescedOverUncoalesced = ratio(hotOn.ReservedPerS, hotOff.ReservedPerS)
			r.P99CoalescedOverUncoalesced = ratio(hotOn.LatencyMs.P99, hotOff.LatencyMs.P99)
		}
		if spreadOn != nil {
			r.SpreadCoalescedPerS = spreadOn.ReservedPerS
		}
		if spreadOff != nil {
			r.SpreadUncoalescedPerS = spreadOff.ReservedPerS
		}
		if spreadOn != nil && spreadOff != nil {
			r.SpreadCoalescedOverUncoalesced = ratio(spreadOn.ReservedPerS, spreadOff.ReservedPerS)
		}
		for _, x := range runs {
			if x.Backend == b {
				r.PeakRSSMB = max(r.PeakRSSMB, x.PeakRSSMB)
				r.Oversold += x.Oversold
				r.Lost += x.Lost
				// A judged window the store disagrees with is damage too.
				if x.Judge != nil && x.Judge.Readback.Damaged() {
					r.JudgedUnsafe = true
				}
			}
		}
		out = append(out, r)
	}
	return out
}

func (r BackendRatios) round() int { return r.Round }

func (t TargetResult) round() int { return t.Round }

// ratio is a/b cut to three decimals, or nil when b is not positive. Cut,
// not rounded: a target is judged on the stored figure, and rounding would
// lift a ratio just short of its target onto it (0.29951 to 0.3, met).
func ratio(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	v := cut3(a / b)
	return &v
}

// cut3 cuts v to three decimals, toward zero.
func cut3(v float64) float64 { return math.Trunc(v*1000) / 1000 }

// TargetStatus is the outcome of one target.
type TargetStatus string

// Target outcomes.
const (
	TargetMet    TargetStatus = "met"
	TargetMissed TargetStatus = "MISSED"
	TargetNoData TargetStatus = "no data" // a run it needs did not complete; counts as missed
)

// TargetResult is one target checked for one backend.
type TargetResult struct {
	ID      string       `json:"id"`
	Target  string       `json:"target"`
	Backend string       `json:"backend"`
	Want    string       `json:"want"` // "≥5×", "<150 MB"
	Round   int          `json:"round,omitempty"`
	Value   *float64     `json:"value"`
	Status  TargetStatus `json:"status"`
	// Values are the target's value in each round, for a median over the
	// rounds (Value is then the median).
	Values []*float64 `json:"round_values,omitempty"`
}

// benchTarget is one target of issue #7, on the hot-SKU runs of a 2-core
// machine, three instances, 64 clients. The limits are the issue's; the
// values are always measured.
type benchTarget struct {
	id, text string
	applies  func(BackendRatios) bool
	value    func(BackendRatios) *float64
	op       string // ">=", "<=" or "<"
	limit    float64
	unit     string
}

var benchTargets = []benchTarget{
	// The ceiling is one order per transaction; only a backend that fences
	// its writes (the safe ones) does what the ceiling measures.
	{"ceiling", "hot coalesced ≥ 1.0× store ceiling", func(r BackendRatios) bool { return !r.ExpectedUnsafe },
		func(r BackendRatios) *float64 { return r.CoalescedOverCeiling }, ">=", 1.0, "×"},
	{"speedup", "hot coalesced ≥ 5× uncoalesced", backendIs("redlock"),
		func(r BackendRatios) *float64 { return r.CoalescedOverUncoalesced }, ">=", 5, "×"},
	{"speedup", "hot coalesced ≥ 10× uncoalesced", backendIs("zookeeper"),
		func(r BackendRatios) *float64 { return r.CoalescedOverUncoalesced }, ">=", 10, "×"},
	{"p99", "hot p99 coalesced ≤ uncoalesced", func(BackendRatios) bool { return true },
		func(r BackendRatios) *float64 {
			if v := r.P99CoalescedOverUncoalesced; v != nil && *v <= 0 {
				return nil // no coalesced latency recorded: 0 would pass
			}
			return r.P99CoalescedOverUncoalesced
		}, "<=", 1.0, "×"},
	{"rss", "peak RSS < 150 MB per instance", func(BackendRatios) bool { return true },
		func(r BackendRatios) *float64 {
			if r.PeakRSSMB <= 0 { // no instance ran, or no /proc
				return nil
			}
			v := r.PeakRSSMB
			return &v
		}, "<", 150, " MB"},
}

func backendIs(names ...string) func(BackendRatios) bool {
	return func(r BackendRatios) bool { return slices.Contains(names, r.Backend) }
}

// evaluateTargets checks every target that applies to each backend.
func evaluateTargets(ratios []BackendRatios) []TargetResult {
	var out []TargetResult
	for _, r := range ratios {
		for _, t := range slices.Concat(benchTargets, judgedTargets) {
			if !t.applies(r) {
				continue
			}
			v := t.value(r)
			st := TargetNoData
			if v != nil {
				st = TargetMissed
				if t.met(*v) {
					st = TargetMet
				}
			}
			out = append(out, TargetResult{ID: t.id, Target: t.text, Backend: r.Backend, Want: t.want(), Value: v, Status: st})
		}
	}
	return out
}

// medianTargets judges each target of a suite of several rounds on its
// median over the rounds: results of one target and backend in round
// order, one per round. A target measured in fewer than a majority of the
// rounds has no data. The memory cap is the exception: it is judged on its
// worst round, since a peak that broke it once broke it.
func medianTargets(results []TargetResult) []TargetResult {
	rounds := 0
	for _, t := range results {
		rounds = max(rounds, t.Round)
	}
	var out []TargetResult
	at := map[string]int{} // backend/id/text → index in out
	for _, t := range results {
		k := t.Backend + "/" + t.ID + "/" + t.Target
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, TargetResult{ID: t.ID, Target: t.Target, Backend: t.Backend, Want: t.Want,
				Values: make([]*float64, rounds)})
		}
		if t.Round >= 1 && t.Round <= rounds {
			out[i].Values[t.Round-1] = t.Value
		}
	}
	for i := range out {
		m := &out[i]
		var vs []float64
		for _, v := range m.Values {
			if v != nil {
				vs = append(vs, *v)
			}
		}
		m.Status = TargetNoData
		var v float64
		switch {
		case m.ID == "rss" && len(vs) > 0:
			v = slices.Max(vs) // a peak that broke the cap once broke it
		case 2*len(vs) <= rounds:
			continue
		default:
			v = cut3(median(vs))
		}
		m.Value = &v
		m.Status = TargetMissed
		if t, ok := targetNamed(m.ID, m.Target); ok && t.met(v) {
			m.Status = TargetMet
		}
	}
	return out
}

// targetNamed is the target with id and text.
func targetNamed(id, text string) (benchTarget, bool) {
	for _, t := range slices.Concat(benchTargets, judgedTargets) {
		if t.id == id && t.text == text {
			return t, true
		}
	}
	return benchTarget{}, false
}

// want is the target's condition in short: "≥5×".
func (t benchTarget) want() string {
	sym := map[string]string{">=": "≥", "<=": "≤", "<": "<"}[t.op]
	return fmt.Sprintf("%s%g%s", sym, t.limit, t.unit)
}

func (t benchTarget) met(v float64) bool {
	switch t.op {
	case ">=":
		return v >= t.limit
	case "<=":
		return v <= t.limit
	case "<":
		return v < t.limit
	}
	panic(fmt.Sprintf("bench target %q: unknown op %q", t.id, t.op))
}

// runFailures lists what fails the suite: a run that did not complete, a
// run of a safe backend with oversold or lost units (or sources that
// disagree, or orders left unresolved), or a judged window of a safe
// backend whose store disagrees with the judge's answers or could not be
// read back. Missed targets do not fail it; they are reported.
func runFailures(runs []Run) []string {
	var fs []string
	for _, r := range runs {
		name := fmt.Sprintf("%s %s coalesce=%s", r.Backend, r.Workload, r.Coalesce)
		switch {
		case !r.Ran:
			fs = append(fs, fmt.Sprintf("%s: did not run: %s", name, r.Error))
		case !r.ExpectedUnsafe && !r.Safe:
			fs = append(fs, fmt.Sprintf("%s: %s", name, r.Verdict))
		}
		if rb := r.readback(); rb != nil && !rb.Safe && !r.ExpectedUnsafe {
			fs = append(fs, fmt.Sprintf("%s: judged window: %s", name, rb.Verdict))
		}
	}
	return fs
}

// rivalFailures lists the rivals' judged windows whose store disagrees
// with their answers or could not be read: a rival is a safe backend's
// service, and its window fails the suite as the service's would.
func rivalFailures(limits []Limits) []string {
	var fs []string
	for _, l := range limits {
		if l.Rival == nil || l.Rival.Readback == nil || l.Rival.Readback.Safe || compare.ExpectedUnsafe(l.RivalBackend) {
			continue
		}
		fs = append(fs, fmt.Sprintf("%s spread coalesce=on, in turns with %s: judged window: %s", l.RivalBackend, l.Backend, l.Rival.Readback.Verdict))
	}
	return fs
}

// readback is the run's judged window's read back, or nil.
func (r Run) readback() *Readback {
	if r.Judge == nil {
		return nil
	}
	return r.Judge.Readback
}

// Damaged reports whether a safe backend oversold or lost units, in a run
// or in its judged window: the suite then exits 3, not 1.
func (res *Result) Damaged() bool {
	for _, r := range res.Runs {
		if !r.ExpectedUnsafe && (r.Oversold+r.Lost > 0 || r.readback().Damaged()) {
			return true
		}
	}
	for _, l := range res.Limits {
		if l.Rival != nil && !compare.ExpectedUnsafe(l.RivalBackend) && l.Rival.Readback.Damaged() {
			return true
		}
	}
	return false
}

// serversMissing is every server some window did not find, in order.
func serversMissing(runs []Run, limits []Limits) []string {
	var out []string
	add := func(j *Judged) {
		if j == nil {
			return
		}
		for _, m := range j.ServersMissing {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	for _, r := range runs {
		add(r.Judge)
	}
	for _, l := range limits {
		add(l.Floor)
		add(l.Rival)
	}
	return out
}

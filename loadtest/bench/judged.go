package bench

import "github.com/stockguard/stockguard/loadtest/tally"

// JudgedRatios are one backend's figures from the outside generator
// (vegeta, coalescing on unless named off) and the limits measured next
// to its runs, with the ratios issue 13's targets are stated in. A nil
// ratio could not be computed (a run or a limit is missing). The p99s are
// of the 201s alone. "Naive" is the library lock loops (package naive).
type JudgedRatios struct {
	HotPerS        float64 `json:"hot_per_s"`
	HotP99Ms       float64 `json:"hot_p99_ms"`
	HotOffPerS     float64 `json:"hot_off_per_s"`
	SpreadPerS     float64 `json:"spread_per_s"`
	SpreadP99Ms    float64 `json:"spread_p99_ms"`
	SpreadOffPerS  float64 `json:"spread_off_per_s"`
	SpreadOffP99Ms float64 `json:"spread_off_p99_ms"`

	NaiveHotPerS    float64  `json:"naive_hot_per_s,omitempty"`
	NaiveSpreadPerS float64  `json:"naive_spread_per_s,omitempty"`
	SpreadOverNaive *float64 `json:"spread_over_naive"`
	HotOverNaive    *float64 `json:"hot_over_naive"`

	SpreadCeilingPerS       float64  `json:"spread_ceiling_per_s"`
	SpreadOverSpreadCeiling *float64 `json:"spread_over_spread_ceiling"`

	FloorPerS    float64  `json:"floor_per_s,omitempty"`
	HotOverFloor *float64 `json:"hot_over_floor"`

	// PostgresPerS is postgres' 1,000-SKU window in turns with this
	// backend's (Limits.Rival), and SpreadOverPostgres this backend's rate
	// over it (redis ≥ postgres).
	PostgresPerS       float64  `json:"postgres_in_turns_per_s,omitempty"`
	SpreadOverPostgres *float64 `json:"spread_over_postgres"`

	// CPU per order (µs) by process class, from the coalesced runs'
	// windows: class → µs.
	HotCPUUs    map[string]float64 `json:"hot_cpu_per_order_us,omitempty"`
	SpreadCPUUs map[string]float64 `json:"spread_cpu_per_order_us,omitempty"`

	// HotBound is, for a backend judged against the floor, what stands
	// between its hot SKU and the target (see HotBound).
	HotBound *HotBound `json:"hot_bound,omitempty"`
}

// addLimitRatios fills each backend's JudgedRatios from the judged runs
// and the limits.
func addLimitRatios(ratios []BackendRatios, runs []Run, limits []Limits) {
	for i := range ratios {
		r := &ratios[i]
		j := &r.Judged
		if x := judgedOf(runs, r.Backend, benchHot, "on"); x != nil {
			j.HotPerS, j.HotP99Ms, j.HotCPUUs = x.OrdersPerS, x.CreatedLatencyMs.P99, cpuByClass(x)
		}
		if x := judgedOf(runs, r.Backend, benchHot, "off"); x != nil {
			j.HotOffPerS = x.OrdersPerS
		}
		if x := judgedOf(runs, r.Backend, benchSpread, "on"); x != nil {
			j.SpreadPerS, j.SpreadP99Ms, j.SpreadCPUUs = x.OrdersPerS, x.CreatedLatencyMs.P99, cpuByClass(x)
		}
		if x := judgedOf(runs, r.Backend, benchSpread, "off"); x != nil {
			j.SpreadOffPerS, j.SpreadOffP99Ms = x.OrdersPerS, x.CreatedLatencyMs.P99
		}
		for _, l := range limits {
			if l.Backend != r.Backend {
				continue
			}
			if l.NaiveHot != nil {
				j.NaiveHotPerS, j.HotOverNaive = l.NaiveHot.OrdersPerS, ratioIf(j.HotPerS, l.NaiveHot.OrdersPerS)
			}
			if l.NaiveSpread != nil {
				j.NaiveSpreadPerS, j.SpreadOverNaive = l.NaiveSpread.OrdersPerS, ratioIf(j.SpreadPerS, l.NaiveSpread.OrdersPerS)
			}
			if l.SpreadCeiling != nil {
				j.SpreadCeilingPerS, j.SpreadOverSpreadCeiling = l.SpreadCeiling.PerS, ratioIf(j.SpreadPerS, l.SpreadCeiling.PerS)
			}
			// A floor that answered anything but 201 (a floor process down,
			// refusing) ran slow for its own reasons: no limit to judge by.
			if l.Floor != nil && l.Floor.Error == "" && l.Floor.onlyCreated() {
				j.FloorPerS, j.HotOverFloor = l.Floor.OrdersPerS, ratioIf(j.HotPerS, l.Floor.OrdersPerS)
			}
			// Only a rival whose store agrees with its answers is a rate to
			// beat: a window that lost units ran by other rules.
			if l.RivalBackend == "postgres" && l.Rival.verified() {
				j.PostgresPerS, j.SpreadOverPostgres = l.Rival.OrdersPerS, ratioIf(j.SpreadPerS, l.Rival.OrdersPerS)
			}
		}
	}
}

// verified reports whether a rival's window completed and its store,
// read back, agrees with its answers.
func (j *Judged) verified() bool {
	return j != nil && j.Error == "" && j.Readback != nil && j.Readback.Error == "" && j.Readback.Safe
}

// judgedOf is the usable judged attack of the run of backend, workload and
// coalesce in runs (one round's), or nil.
func judgedOf(runs []Run, backend, workload, coalesce string) *Judged {
	for _, r := range runs {
		if r.Backend == backend && r.Workload == workload && r.Coalesce == coalesce {
			return r.judgedFigures()
		}
	}
	return nil
}

// judgedFigures is the run's judged attack if its figures may be used: the
// run completed, the attack did, and the store agrees with its answers (a
// backend unsafe by design keeps figures whose store disagrees).
func (r Run) judgedFigures() *Judged {
	j := r.Judge
	if !r.Ran || j == nil || j.Error != "" || j.Readback == nil || j.Readback.Error != "" {
		return nil
	}
	if !j.Readback.Safe && !r.ExpectedUnsafe {
		return nil
	}
	return j
}

// onlyCreated reports whether the window answered nothing but 201s.
func (j *Judged) onlyCreated() bool {
	for code, n := range j.Status {
		if code != "201" && n > 0 {
			return false
		}
	}
	return true
}

// ratioIf is ratio, or nil when the numerator was not measured either.
func ratioIf(a, b float64) *float64 {
	if a <= 0 {
		return nil
	}
	return ratio(a, b)
}

// cpuByClass is a window's CPU per order by class, plus "total".
func cpuByClass(j *Judged) map[string]float64 {
	if j.CPU == nil {
		return nil
	}
	m := map[string]float64{"total": tally.Round(j.CPU.TotalPerOrderUs, 1)}
	for _, c := range j.CPU.Classes {
		m[c.Class] = c.PerOrderUs
	}
	return m
}

// judgedTargets are issue 13's targets (2-core machine, 3 instances,
// vegeta 64 workers, one-unit orders): the values are the judge's, the
// ratios from the same suite run.
var judgedTargets = []benchTarget{
	{"naive-spread", "1,000 SKUs ≥ 1.5× naive go-redsync loop", backendIs("redlock"),
		func(r BackendRatios) *float64 { return r.Judged.SpreadOverNaive }, ">=", 1.5, "×"},
	{"naive-spread", "1,000 SKUs ≥ 1.5× naive zk.Lock loop", backendIs("zookeeper"),
		func(r BackendRatios) *float64 { return r.Judged.SpreadOverNaive }, ">=", 1.5, "×"},
	{"spread-ceiling", "1,000 SKUs ≥ 0.25× store spread ceiling", backendIs(ceilingBackends...),
		func(r BackendRatios) *float64 { return r.Judged.SpreadOverSpreadCeiling }, ">=", 0.25, "×"},
	{"over-postgres", "1,000 SKUs redis ≥ postgres", backendIs("redis"),
		func(r BackendRatios) *float64 { return r.Judged.SpreadOverPostgres }, ">=", 1, "×"},
	{"spread-p99", "1,000 SKUs p99 ≤ 100 ms", func(BackendRatios) bool { return true },
		func(r BackendRatios) *float64 { return positive(r.Judged.SpreadP99Ms) }, "<=", 100, " ms"},
	{"hot-rate", "hot ≥ 3,700 orders/s", backendIs("redlock"),
		func(r BackendRatios) *float64 { return positive(r.Judged.HotPerS) }, ">=", 3700, "/s"},
	{"hot-rate", "hot ≥ 3,800 orders/s", backendIs("zookeeper"),
		func(r BackendRatios) *float64 { return positive(r.Judged.HotPerS) }, ">=", 3800, "/s"},
	{"floor", "hot ≥ 0.3× HTTP floor", backendIs(floorBackends...),
		func(r BackendRatios) *float64 { return r.Judged.HotOverFloor }, ">=", floorShare, "×"},
}

// positive is &v, or nil for a figure that was not measured.
func positive(v float64) *float64 {
	if v <= 0 {
		return nil
	}
	return &v
}

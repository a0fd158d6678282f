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

	// SpreadOverPostgres is this backend's spread rate over postgres's, in
	// the same suite run (redis ≥ postgres).
	SpreadOverPostgres *float64 `json:"spread_over_postgres"`

	// CPU per order (µs) by process class, from the coalesced runs'
	// windows: class → µs.
	HotCPUUs    map[string]float64 `json:"hot_cpu_per_order_us,omitempty"`
	SpreadCPUUs map[string]float64 `json:"spread_cpu_per_order_us,omitempty"`

	// HotCPUBoundPerS and SpreadCPUBoundPerS are the most orders/s the
	// machine's cores allow at the coalesced windows' CPU an order
	// (cpuBound); the Bound ratios are the same limits over each
	// denominator above. A target beyond its bound cannot be met on this
	// machine at this CPU an order, however the lock hand-off is done.
	HotCPUBoundPerS         float64  `json:"hot_cpu_bound_per_s,omitempty"`
	SpreadCPUBoundPerS      float64  `json:"spread_cpu_bound_per_s,omitempty"`
	HotBoundOverFloor       *float64 `json:"hot_bound_over_floor,omitempty"`
	SpreadBoundOverNaive    *float64 `json:"spread_bound_over_naive,omitempty"`
	SpreadBoundOverCeiling  *float64 `json:"spread_bound_over_spread_ceiling,omitempty"`
	SpreadBoundOverPostgres *float64 `json:"spread_bound_over_postgres,omitempty"`
}

// serverClass is the CPU class of the lock servers a backend talks to
// (postgres locks in the store itself; none and local use no server).
var serverClass = map[string]string{"redis": "redis", "redlock": "redis", "zookeeper": "zookeeper", "etcd": "etcd"}

// servingUs is a window's CPU an order in the classes that serve the
// order: the instances, the store, the client and the backend's own lock
// servers. The other backends' idle servers (etcd's heartbeats during a
// redlock run) are the machine's background; leaving them out makes
// cpuBound an upper bound. Zero when the window's CPU was not read.
func servingUs(backend string, j *Judged) float64 {
	if j == nil || j.CPU == nil {
		return 0
	}
	var us float64
	for _, c := range j.CPU.Classes {
		switch c.Class {
		case "instances", "postgres", "client", serverClass[backend]:
			us += c.PerOrderUs
		}
	}
	return us
}

// cpuBound is the most orders/s nproc cores allow at us µs of CPU an
// order: every core busy serving orders and nothing else, no idle, no
// wait. Zero when either is unknown.
func cpuBound(nproc int, us float64) float64 {
	if nproc <= 0 || us <= 0 {
		return 0
	}
	return tally.Round(float64(nproc)*1e6/us, 0)
}

// addLimitRatios fills each backend's JudgedRatios from the judged runs
// and the limits, the CPU bounds for a machine of nproc cores.
func addLimitRatios(ratios []BackendRatios, runs []Run, limits []Limits, nproc int) {
	judged := func(backend, workload, coalesce string) *Judged {
		for _, r := range runs {
			if r.Backend == backend && r.Workload == workload && r.Coalesce == coalesce {
				return r.judgedFigures()
			}
		}
		return nil
	}
	var postgresSpread float64
	for i := range ratios {
		r := &ratios[i]
		j := &r.Judged
		if x := judged(r.Backend, benchHot, "on"); x != nil {
			j.HotPerS, j.HotP99Ms, j.HotCPUUs = x.OrdersPerS, x.CreatedLatencyMs.P99, cpuByClass(x)
			j.HotCPUBoundPerS = cpuBound(nproc, servingUs(r.Backend, x))
		}
		if x := judged(r.Backend, benchHot, "off"); x != nil {
			j.HotOffPerS = x.OrdersPerS
		}
		if x := judged(r.Backend, benchSpread, "on"); x != nil {
			j.SpreadPerS, j.SpreadP99Ms, j.SpreadCPUUs = x.OrdersPerS, x.CreatedLatencyMs.P99, cpuByClass(x)
			j.SpreadCPUBoundPerS = cpuBound(nproc, servingUs(r.Backend, x))
		}
		if x := judged(r.Backend, benchSpread, "off"); x != nil {
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
				j.SpreadBoundOverNaive = ratioIf(j.SpreadCPUBoundPerS, l.NaiveSpread.OrdersPerS)
			}
			if l.SpreadCeiling != nil {
				j.SpreadCeilingPerS, j.SpreadOverSpreadCeiling = l.SpreadCeiling.PerS, ratioIf(j.SpreadPerS, l.SpreadCeiling.PerS)
				j.SpreadBoundOverCeiling = ratioIf(j.SpreadCPUBoundPerS, l.SpreadCeiling.PerS)
			}
			if l.Floor != nil && l.Floor.Error == "" {
				j.FloorPerS, j.HotOverFloor = l.Floor.OrdersPerS, ratioIf(j.HotPerS, l.Floor.OrdersPerS)
				j.HotBoundOverFloor = ratioIf(j.HotCPUBoundPerS, l.Floor.OrdersPerS)
			}
		}
		if r.Backend == "postgres" {
			postgresSpread = j.SpreadPerS
		}
	}
	for i := range ratios {
		j := &ratios[i].Judged
		j.SpreadOverPostgres = ratioIf(j.SpreadPerS, postgresSpread)
		j.SpreadBoundOverPostgres = ratioIf(j.SpreadCPUBoundPerS, postgresSpread)
	}
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
		func(r BackendRatios) *float64 { return r.Judged.SpreadOverNaive }, ">=", 1.5, "×",
		func(r BackendRatios) *float64 { return r.Judged.SpreadBoundOverNaive }},
	{"naive-spread", "1,000 SKUs ≥ 1.5× naive zk.Lock loop", backendIs("zookeeper"),
		func(r BackendRatios) *float64 { return r.Judged.SpreadOverNaive }, ">=", 1.5, "×",
		func(r BackendRatios) *float64 { return r.Judged.SpreadBoundOverNaive }},
	{"spread-ceiling", "1,000 SKUs ≥ 0.25× store spread ceiling", backendIs("postgres"),
		func(r BackendRatios) *float64 { return r.Judged.SpreadOverSpreadCeiling }, ">=", 0.25, "×",
		func(r BackendRatios) *float64 { return r.Judged.SpreadBoundOverCeiling }},
	{"over-postgres", "1,000 SKUs redis ≥ postgres", backendIs("redis"),
		func(r BackendRatios) *float64 { return r.Judged.SpreadOverPostgres }, ">=", 1, "×",
		func(r BackendRatios) *float64 { return r.Judged.SpreadBoundOverPostgres }},
	{"spread-p99", "1,000 SKUs p99 ≤ 100 ms", func(BackendRatios) bool { return true },
		func(r BackendRatios) *float64 { return positive(r.Judged.SpreadP99Ms) }, "<=", 100, " ms", nil},
	{"hot-rate", "hot ≥ 3,700 orders/s", backendIs("redlock"),
		func(r BackendRatios) *float64 { return positive(r.Judged.HotPerS) }, ">=", 3700, "/s",
		func(r BackendRatios) *float64 { return positive(r.Judged.HotCPUBoundPerS) }},
	{"hot-rate", "hot ≥ 3,800 orders/s", backendIs("zookeeper"),
		func(r BackendRatios) *float64 { return positive(r.Judged.HotPerS) }, ">=", 3800, "/s",
		func(r BackendRatios) *float64 { return positive(r.Judged.HotCPUBoundPerS) }},
	{"floor", "hot ≥ 0.3× HTTP floor", backendIs(floorBackends...),
		func(r BackendRatios) *float64 { return r.Judged.HotOverFloor }, ">=", 0.3, "×",
		func(r BackendRatios) *float64 { return r.Judged.HotBoundOverFloor }},
}

// positive is &v, or nil for a figure that was not measured.
func positive(v float64) *float64 {
	if v <= 0 {
		return nil
	}
	return &v
}

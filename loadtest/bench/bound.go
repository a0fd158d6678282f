package bench

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/stockguard/stockguard/loadtest/tally"
)

// floorShare is the hot SKU's target against the HTTP floor (issue 13).
const floorShare = 0.3

// HotBound is what a hot SKU's judged window says about the floor target:
// whether the machine's cores could carry floorShare × the floor at the
// window's CPU an order, and what its serial chain (a hold and the
// hand-off to the next holder, per hold) would have to shrink to. The
// first is the utilisation law's bound (every core the window had busy,
// no chain): a rate it puts below the target is out of reach until an
// order costs less CPU, however the chain is cut. The cores a window had
// are the machine's less the share the hypervisor stole in it: on a
// shared VM that share is what separates a fast spell from a slow one. Both use the window's own figures; CPU an
// order falls a little as batches grow, so the bound is of this cost, not
// of every implementation.
type HotBound struct {
	PerS       float64 `json:"per_s"`
	TargetPerS float64 `json:"target_per_s"`
	// CPUPerOrderUs is every process class's CPU an order, CoresBusy what
	// it kept busy, Cores the machine's, CoresHad what the hypervisor left
	// the machine in the window (Cores without a steal reading).
	CPUPerOrderUs float64 `json:"cpu_per_order_us"`
	CoresBusy     float64 `json:"cores_busy"`
	Cores         int     `json:"cores"`
	CoresHad      float64 `json:"cores_had"`
	// CPUBoundPerS is CoresHad over CPUPerOrderUs; CoresForTarget the
	// cores the target would keep busy at CPUPerOrderUs.
	CPUBoundPerS   float64 `json:"cpu_bound_per_s"`
	CoresForTarget float64 `json:"cores_for_target"`
	// CycleMs is a hold and a hand-off in the window, per hold, and
	// CycleForTargetMs what they may take at the target with as many
	// orders a hold. Zero when the window's critical sections were not read.
	OrdersPerHold    float64 `json:"orders_per_hold,omitempty"`
	CycleMs          float64 `json:"cycle_ms,omitempty"`
	CycleForTargetMs float64 `json:"cycle_for_target_ms,omitempty"`
	// Bound is "cpu" when CPUBoundPerS is below the target, else "chain".
	Bound string `json:"bound"`
}

// addHotBounds fills HotBound for every backend measured against the
// floor, from its coalesced hot window; cores is the machine's.
func addHotBounds(ratios []BackendRatios, runs []Run, cores int) {
	for i := range ratios {
		r := &ratios[i]
		if !slices.Contains(floorBackends, r.Backend) || r.Judged.FloorPerS <= 0 || cores <= 0 {
			continue
		}
		w := judgedOf(runs, r.Backend, benchHot, "on")
		if w == nil || w.CPU == nil || w.CPU.TotalPerOrderUs <= 0 || w.OrdersPerS <= 0 {
			continue
		}
		had := w.CPU.CoresHad(cores)
		b := &HotBound{PerS: w.OrdersPerS, TargetPerS: tally.Round(floorShare*r.Judged.FloorPerS, 0),
			CPUPerOrderUs: tally.Round(w.CPU.TotalPerOrderUs, 0), CoresBusy: w.CPU.CoresBusy, Cores: cores,
			CoresHad: tally.Round(had, 2)}
		b.CPUBoundPerS = tally.Round(had*1e6/w.CPU.TotalPerOrderUs, 0)
		b.CoresForTarget = tally.Round(b.TargetPerS*w.CPU.TotalPerOrderUs/1e6, 2)
		if s := w.Section; s != nil && s.OrdersPerHold > 0 && s.HandOffMs > 0 {
			b.OrdersPerHold = s.OrdersPerHold
			b.CycleMs = tally.Round(s.HoldMs+s.HandOffMs, 2)
			b.CycleForTargetMs = tally.Round(1000*s.OrdersPerHold/b.TargetPerS, 2)
		}
		b.Bound = "chain"
		if b.CPUBoundPerS < b.TargetPerS {
			b.Bound = "cpu"
		}
		r.Judged.HotBound = b
	}
}

// printHotBounds says, for each hot window judged against the floor, which
// of the machine's cores or the serial chain stands between it and the target.
func printHotBounds(w io.Writer, res *Result) {
	if !slices.ContainsFunc(res.Backends, func(r BackendRatios) bool { return r.Judged.HotBound != nil }) {
		return
	}
	fmt.Fprintf(w, "\n== what stands between the hot SKU and %g× the floor (the judge's coalesced window; cores had: the machine's less the share the hypervisor stole in the window; CPU bound: the cores had over the window's CPU an order, every one busy; cycle: a hold and its hand-off)\n", floorShare)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "backend\thot/s\ttarget/s\tCPU µs/order\tcores busy\tcores had\tCPU bound/s\tcores the target takes\torders a hold\tcycle ms\tcycle the target allows ms\tbound\t\n")
	for _, r := range res.Backends {
		b := r.Judged.HotBound
		if b == nil {
			continue
		}
		cycle, allows, orders := "–", "–", "–"
		if b.CycleMs > 0 {
			cycle, allows, orders = fmt.Sprintf("%.2f", b.CycleMs), fmt.Sprintf("%.2f", b.CycleForTargetMs), fmt.Sprintf("%.1f", b.OrdersPerHold)
		}
		verdict := "the chain: the cores would carry it"
		if b.Bound == "cpu" {
			verdict = fmt.Sprintf("CPU: out of reach at this CPU an order (%.2f of %d cores had)", b.CoresHad, b.Cores)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t\n", r.Backend, b.PerS, b.TargetPerS, b.CPUPerOrderUs,
			b.CoresBusy, b.CoresHad, b.CPUBoundPerS, b.CoresForTarget, orders, cycle, allows, verdict)
	}
	_ = tw.Flush()
}

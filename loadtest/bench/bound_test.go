package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/bench/judge"
	"github.com/stockguard/stockguard/loadtest/bench/section"
)

// TestHotBoundsNameWhatStandsInTheWay uses figures of a real suite's first
// round (s26): redlock's cores would carry 0.3× the floor and its cycle is
// what is too long; zookeeper's CPU an order puts the target beyond two
// cores.
func TestHotBoundsNameWhatStandsInTheWay(t *testing.T) {
	hot := func(backend string, perS, cpuUs, busy float64, s *section.Window) Run {
		r := judgedRun(backend, benchHot, "on", perS, 30)
		r.Judge.CPU.TotalPerOrderUs, r.Judge.CPU.CoresBusy = cpuUs, busy
		r.Judge.Section = s
		return r
	}
	runs := []Run{
		hot("redlock", 4468, 332, 1.48, &section.Window{OrdersPerHold: 37.5, HoldMs: 6.49, HandOffMs: 1.93}),
		hot("zookeeper", 2967, 515, 1.53, &section.Window{OrdersPerHold: 36.5, HoldMs: 7.55, HandOffMs: 4.79}),
		hot("postgres", 3848, 365, 1.4, nil), // not judged against the floor
	}
	floor := func(perS float64) *Judged { return &Judged{Result: judge.Result{OrdersPerS: perS}} }
	limits := []Limits{{Backend: "redlock", Floor: floor(15875)}, {Backend: "zookeeper", Floor: floor(15884)}}
	ratios := benchRatios([]string{"redlock", "zookeeper", "postgres"}, runs, nil)
	addLimitRatios(ratios, runs, limits)
	addHotBounds(ratios, runs, 2)

	rl, zk := ratios[0].Judged.HotBound, ratios[1].Judged.HotBound
	if rl == nil || zk == nil {
		t.Fatalf("bounds missing: %s", dumpRatios(ratios))
	}
	if rl.TargetPerS != 4763 || rl.CPUBoundPerS != 6024 || rl.CoresForTarget != 1.58 || rl.CycleMs != 8.42 ||
		rl.CycleForTargetMs != 7.87 || rl.CoresHad != 2 || rl.Bound != "chain" {
		t.Errorf("redlock: %+v", *rl)
	}
	if zk.TargetPerS != 4765 || zk.CPUBoundPerS != 3883 || zk.CoresForTarget != 2.45 || zk.CycleMs != 12.34 || zk.Bound != "cpu" {
		t.Errorf("zookeeper: %+v", *zk)
	}
	if ratios[2].Judged.HotBound != nil {
		t.Errorf("postgres has no floor target, got %+v", *ratios[2].Judged.HotBound)
	}

	var b bytes.Buffer
	printHotBounds(&b, &Result{Backends: ratios})
	out := b.String()
	for _, want := range []string{"the chain: the cores would carry it", "CPU: out of reach at this CPU an order (2.00 of 2 cores had)", "8.42", "2.45"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "postgres") {
		t.Errorf("table shows postgres:\n%s", out)
	}
}

// TestHotBoundCountsTheCoresTheWindowHad: the same redlock window with a
// quarter of the machine's time stolen by the hypervisor had 1.5 cores,
// which at its CPU an order carry 4,518/s, below 0.3× the floor.
func TestHotBoundCountsTheCoresTheWindowHad(t *testing.T) {
	r := judgedRun("redlock", benchHot, "on", 4468, 30)
	stolen := 0.25
	r.Judge.CPU.TotalPerOrderUs, r.Judge.CPU.CoresBusy, r.Judge.CPU.StealShare = 332, 1.48, &stolen
	r.Judge.Section = &section.Window{OrdersPerHold: 37.5, HoldMs: 6.49, HandOffMs: 1.93}
	ratios := benchRatios([]string{"redlock"}, []Run{r}, nil)
	addLimitRatios(ratios, []Run{r}, []Limits{{Backend: "redlock", Floor: &Judged{Result: judge.Result{OrdersPerS: 15875}}}})
	addHotBounds(ratios, []Run{r}, 2)
	b := ratios[0].Judged.HotBound
	if b == nil || b.CoresHad != 1.5 || b.CPUBoundPerS != 4518 || b.Bound != "cpu" {
		t.Fatalf("got %+v, want 1.5 cores had, a CPU bound of 4518/s, bound by the CPU", b)
	}
	var out bytes.Buffer
	printHotBounds(&out, &Result{Backends: ratios})
	if !strings.Contains(out.String(), "(1.50 of 2 cores had)") {
		t.Errorf("table:\n%s", out.String())
	}
}

// TestHotBoundNeedsTheWindowAndTheFloor: no bound from a failed floor, a
// window without CPU, or an unknown core count.
func TestHotBoundNeedsTheWindowAndTheFloor(t *testing.T) {
	noCPU := judgedRun("zookeeper", benchHot, "on", 3000, 30)
	noCPU.Judge.CPU = nil
	for name, c := range map[string]struct {
		run   Run
		floor *Judged
		cores int
	}{
		"failed floor": {judgedRun("redlock", benchHot, "on", 3000, 30), &Judged{Error: "did not start"}, 2},
		"no CPU":       {noCPU, &Judged{Result: judge.Result{OrdersPerS: 10000}}, 2},
		"no cores":     {judgedRun("redlock", benchHot, "on", 3000, 30), &Judged{Result: judge.Result{OrdersPerS: 10000}}, 0},
	} {
		ratios := benchRatios([]string{c.run.Backend}, []Run{c.run}, nil)
		addLimitRatios(ratios, []Run{c.run}, []Limits{{Backend: c.run.Backend, Floor: c.floor}})
		addHotBounds(ratios, []Run{c.run}, c.cores)
		if b := ratios[0].Judged.HotBound; b != nil {
			t.Errorf("%s: got %+v", name, *b)
		}
	}
}

package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stockguard/stockguard/loadtest/bench/cpu"
	"github.com/stockguard/stockguard/loadtest/bench/judge"
	"github.com/stockguard/stockguard/loadtest/bench/section"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/procs"
	"github.com/stockguard/stockguard/loadtest/run"
)

// Judged is one attack of the outside generator with the CPU each class
// of process spent in its measured window.
type Judged struct {
	judge.Result
	CPU *cpu.Window `json:"cpu,omitempty"`
	// Error says why the attack failed: its figures are not used.
	Error string `json:"error,omitempty"`
	// CPUError says why the CPU was not read; the attack's figures stand.
	CPUError string `json:"cpu_error,omitempty"`
	// Section is what the instances' critical sections did in the window,
	// from their /metrics; nil for the floor, which has none.
	Section *section.Window `json:"section,omitempty"`
	// SectionError says why Section was not read.
	SectionError string `json:"section_error,omitempty"`
	// ServersMissing are the servers not found before this window: their
	// CPU is not in its figures.
	ServersMissing []string `json:"servers_missing,omitempty"`
	// Readback is the store's account of the attack; nil for the floor,
	// which has no store, and for an attack that failed.
	Readback *Readback `json:"readback,omitempty"`
}

// judgeStock is each judged SKU's stock: the most PUT accepts, far above
// what 12 s of any backend can sell.
const judgeStock = 1_000_000_000

// putTries is how many times a judged SKU's PUT is sent before the judge
// gives up on the run.
const putTries = 3

// judgeSettle is each turn's settle when the floor and the service take
// turns (judge.Config.Settle); floorTurns is how many turns each takes
// in a window of the default length, 2 s each.
const (
	judgeSettle = 250 * time.Millisecond
	floorTurns  = 5
)

// turns is how many turns the floor and the service take in the judged
// window: floorTurns, or fewer in a short window, each at least eight
// settles long; one turn in a window too short for two.
func (bc Config) turns() int {
	return max(1, min(floorTurns, int(bc.JudgeWindow/(8*judgeSettle))))
}

// judgeConfig is the attack of one workload on urls.
func (bc Config) judgeConfig(urls, skus []string) judge.Config {
	return judge.Config{URLs: urls, SKUs: skus, Workers: bc.Clients, Warmup: bc.JudgeWarmup, Window: bc.JudgeWindow, Settle: judgeSettle,
		KeyPrefix: run.NewRunID(), HoldSeconds: benchHoldSeconds, Seed: bc.Seed, RequestTimeout: 30 * time.Second}
}

// judgeSide is one side of a judged window: its attack, the PIDs of the
// processes it attacks (the instances, or the floor's), and for the
// service its critical sections' meter.
type judgeSide struct {
	jc       judge.Config
	pids     []int
	sections *section.Meter
}

// judgeWorkload attacks processes already serving, reading the CPU of
// every class around the window, and, with sections (the service, not the
// floor), the instances' critical sections.
func (bc Config) judgeWorkload(ctx context.Context, jc judge.Config, pids []int, sections *section.Meter) *Judged {
	return bc.judgeSides(ctx, []judgeSide{{jc, pids, sections}}, 1)[0]
}

// judgeSides attacks the sides in turns (judge.Interleave), reading the
// CPU of every class and the critical sections around each side's turns,
// and returns each side's window. The servers' processes are looked up
// again for every window: one restarted since the last (or its PID
// reused) would otherwise be read as missing, or as some other process.
// The scrapes are outside the CPU's spans: before each begins, after it
// ends.
func (bc Config) judgeSides(ctx context.Context, sides []judgeSide, turns int) []*Judged {
	servers := bc.findServers()
	type meters struct {
		meter    *cpu.Meter
		cpu      []cpu.Span
		sections []section.Span
		cpuErr   error
		sErr     error
	}
	ts := make([]*meters, len(sides))
	jcs := make([]judge.Config, len(sides))
	for i, sd := range sides {
		t := &meters{meter: cpu.NewMeter(servers.classes(sd.pids))}
		ts[i] = t
		var c cpu.Span
		var sec section.Span
		scrape := func(into *section.Snapshot) {
			if sd.sections == nil || t.sErr != nil {
				return
			}
			*into, t.sErr = sd.sections.Snapshot(ctx)
		}
		jcs[i] = sd.jc
		jcs[i].OnWindow = func(begin bool) {
			var err error
			if begin {
				scrape(&sec.Before)
				c.Before, err = t.meter.Snapshot()
			} else {
				c.After, err = t.meter.Snapshot()
				scrape(&sec.After)
				t.cpu, t.sections = append(t.cpu, c), append(t.sections, sec)
			}
			if err != nil && t.cpuErr == nil {
				t.cpuErr = err
			}
		}
	}
	res, err := judge.Interleave(ctx, jcs, turns)
	out := make([]*Judged, len(sides))
	for i, sd := range sides {
		t := ts[i]
		j := &Judged{ServersMissing: servers.Missing}
		out[i] = j
		if err != nil {
			j.Error = err.Error()
			continue
		}
		j.Result = res[i]
		if t.cpuErr != nil {
			j.CPUError = t.cpuErr.Error()
		} else {
			w := t.meter.Across(t.cpu, res[i].Created)
			j.CPU = &w
		}
		switch {
		case sd.sections == nil:
		case t.sErr != nil:
			j.SectionError = t.sErr.Error()
		default:
			w := section.Across(t.sections, len(sd.jc.SKUs))
			j.Section = &w
		}
	}
	return out
}

// judgeService is compare's AfterRun for one bench run: fresh SKUs of the
// run's workload, the attack, then the read back of those SKUs. With fl,
// the HTTP floor's processes, the floor and the service take turns in the
// window (judgeSides), and the floor's window goes to fl.
func (bc Config) judgeService(workload string, dst **Judged, fl *floorSide, stderr io.Writer) func(context.Context, run.Config, []*procs.Instance) {
	return func(ctx context.Context, cfg run.Config, ins []*procs.Instance) {
		n := 1
		if workload == benchSpread {
			n = bc.SpreadSKUs
		}
		skus := make([]string, n)
		id := run.NewRunID()
		for i := range skus {
			skus[i] = run.SKUName(id, i)
		}
		c := client.New(16, cfg.AdminToken, 10*time.Second)
		defer c.Close()
		err := run.ForEach(ctx, n, 16, func(ctx context.Context, i int) error {
			u := cfg.URLs[i%len(cfg.URLs)]
			var err error
			// A PUT sets the stock, so sending it again is safe; on a
			// saturated machine a lock node's timeout can refuse one.
			for range putTries {
				if _, err = c.PutSKU(ctx, u, skus[i], judgeStock); err == nil || ctx.Err() != nil {
					break
				}
				run.Sleep(ctx, 100*time.Millisecond)
			}
			if err != nil {
				return fmt.Errorf("judge: create SKUs on %s: %w", u, err)
			}
			return nil
		})
		if err != nil {
			*dst = &Judged{Error: err.Error()}
			return
		}
		pids := make([]int, len(ins))
		for i, in := range ins {
			pids[i] = in.PID()
		}
		sides := []judgeSide{{bc.judgeConfig(cfg.URLs, skus), pids, section.NewMeter(cfg.URLs, &http.Client{Timeout: 5 * time.Second})}}
		turns := 1
		if fl != nil {
			sides = append(sides, judgeSide{jc: bc.judgeConfig(fl.urls, []string{"floor-hot"}), pids: fl.pids})
			turns = bc.turns()
			fmt.Fprintf(stderr, "bench: vegeta, %d workers, %v warm-up, %v measured, in %d turns with the HTTP floor (%d processes)\n",
				bc.Clients, bc.JudgeWarmup, bc.JudgeWindow, turns, len(fl.pids))
		} else {
			fmt.Fprintf(stderr, "bench: vegeta, %d workers, %v warm-up, %v measured\n", bc.Clients, bc.JudgeWarmup, bc.JudgeWindow)
		}
		js := bc.judgeSides(ctx, sides, turns)
		j := js[0]
		if j.Error == "" {
			j.Readback = readBack(ctx, c, cfg.URLs[0], skus, judgeStock, j.Result)
		}
		*dst = j
		if fl != nil {
			fl.judged = js[1]
		}
	}
}

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
	// Error says why the attack failed: its figures are not used, and of
	// Result only the counts of its answers so far are kept (for the read
	// back).
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
	// which has no store, and for an attack that failed before an answer
	// that may have left a unit in it.
	Readback *Readback `json:"readback,omitempty"`
}

// judgeStock is each judged SKU's stock: the most PUT accepts, far above
// what 12 s of any backend can sell.
const judgeStock = 1_000_000_000

// putTries is how many times a judged SKU's PUT is sent before the judge
// gives up on the run.
const putTries = 3

// judgeSettle is each turn's settle when a limit and the service take
// turns (judge.Schedule.Settle); limitTurns is how many turns each takes
// in a window of the default length, 2 s each.
const (
	judgeSettle = 250 * time.Millisecond
	limitTurns  = 5
)

// turns is how many turns a limit and the service take in the judged
// window: limitTurns, or fewer in a short window, each at least eight
// settles long; one turn in a window too short for two.
func (bc Config) turns() int {
	return max(1, min(limitTurns, int(bc.JudgeWindow/(8*judgeSettle))))
}

// settle is judgeSettle, or a quarter of a turn in a window too short for
// that (judge.Turns wants turns of four settles at least).
func (bc Config) settle() time.Duration {
	return min(judgeSettle, bc.JudgeWindow/time.Duration(4*bc.turns()))
}

// judgeConfig is the attack of one workload on urls.
func (bc Config) judgeConfig(urls, skus []string) judge.Config {
	return judge.Config{URLs: urls, SKUs: skus, Workers: bc.Clients, Warmup: bc.JudgeWarmup, Window: bc.JudgeWindow,
		KeyPrefix: run.NewRunID(), HoldSeconds: benchHoldSeconds, Seed: bc.Seed, RequestTimeout: 30 * time.Second}
}

// judgeSide is one side of a judged window: vegeta's attack jc on the
// processes pids (the instances, or the floor's), with the service's
// critical sections' meter; or, with turner, a load of another kind (a
// naive loop), whose figures its caller reads.
type judgeSide struct {
	jc       judge.Config
	pids     []int
	sections *section.Meter
	turner   judge.Turner
}

// judgeSides runs the sides in turns (judge.Turns), reading the CPU of
// every class and the critical sections around each attack's turns, and
// returns each attack's window (nil for a turner's). The servers'
// processes are looked up again for every window: one restarted since
// the last (or its PID reused) would otherwise be read as missing, or as
// some other process. The scrapes are outside the CPU's spans: before
// each begins, after it ends.
func (bc Config) judgeSides(ctx context.Context, sides []judgeSide, turns int) []*Judged {
	servers := bc.findServers()
	type meters struct {
		attack   *judge.Side
		meter    *cpu.Meter
		span     cpu.Span
		sec      section.Span
		cpu      []cpu.Span
		sections []section.Span
		cpuErr   error
		sErr     error
	}
	ms := make([]*meters, len(sides))
	turners := make([]judge.Turner, len(sides))
	out := make([]*Judged, len(sides))
	for i, sd := range sides {
		if sd.turner != nil {
			turners[i] = sd.turner
			continue
		}
		a, err := judge.NewSide(sd.jc)
		if err != nil {
			for k := range sides {
				if sides[k].turner == nil {
					out[k] = &Judged{Error: err.Error(), ServersMissing: servers.Missing}
				}
			}
			return out
		}
		defer a.Close()
		ms[i] = &meters{attack: a, meter: cpu.NewMeter(servers.classes(sd.pids))}
		turners[i] = a
	}
	onTurn := func(i int, begin bool) {
		m := ms[i]
		if m == nil {
			return
		}
		scrape := func(into *section.Snapshot) {
			if sides[i].sections == nil || m.sErr != nil {
				return
			}
			*into, m.sErr = sides[i].sections.Snapshot(ctx)
		}
		var err error
		if begin {
			scrape(&m.sec.Before)
			m.span.Before, err = m.meter.Snapshot()
		} else {
			m.span.After, err = m.meter.Snapshot()
			scrape(&m.sec.After)
			m.cpu, m.sections = append(m.cpu, m.span), append(m.sections, m.sec)
		}
		if err != nil && m.cpuErr == nil {
			m.cpuErr = err
		}
	}
	err := judge.Turns(ctx, turners, judge.Schedule{Warmup: bc.JudgeWarmup, Window: bc.JudgeWindow, Turns: turns, Settle: bc.settle(), OnTurn: onTurn})
	for i, m := range ms {
		if m == nil {
			continue
		}
		j := &Judged{ServersMissing: servers.Missing}
		out[i] = j
		if err != nil {
			j.Error, j.Result = err.Error(), m.attack.Answered()
			continue
		}
		j.Result = m.attack.Result()
		if m.cpuErr != nil {
			j.CPUError = m.cpuErr.Error()
		} else {
			w := m.meter.Across(m.cpu, j.Created)
			j.CPU = &w
		}
		switch {
		case sides[i].sections == nil:
		case m.sErr != nil:
			j.SectionError = m.sErr.Error()
		default:
			// The attack's own span, not the scrapes' edges: orders were sent in it alone.
			w := section.Across(m.sections, len(sides[i].jc.SKUs), time.Duration(j.DurationS*float64(time.Second)))
			j.Section = &w
		}
	}
	return out
}

// judgeService is compare's AfterRun for one bench run: fresh SKUs of the
// run's workload, the attack, then the read back of those SKUs. With p, a
// limit (or a rival backend's service, whose SKUs are read back too) and
// the service take turns in the window (judgeSides).
func (bc Config) judgeService(workload string, dst **Judged, p *partner, stderr io.Writer) func(context.Context, run.Config, []*procs.Instance) {
	return func(ctx context.Context, cfg run.Config, ins []*procs.Instance) {
		n := 1
		if workload == benchSpread {
			n = bc.SpreadSKUs
		}
		c := client.New(16, cfg.AdminToken, 10*time.Second)
		defer c.Close()
		skus, err := createJudgedSKUs(ctx, c, cfg.URLs, n)
		if err != nil {
			*dst = &Judged{Error: err.Error()}
			return
		}
		sides := []judgeSide{bc.serviceSide(cfg.URLs, skus, ins)}
		turns := 1
		if p != nil {
			sides = append(sides, p.side(bc))
			turns = bc.turns()
			in := fmt.Sprintf("%d turns", turns)
			if turns == 1 {
				in = "one turn"
			}
			fmt.Fprintf(stderr, "bench: vegeta, %d workers, %v warm-up, %v measured, in %s with %s\n",
				bc.Clients, bc.JudgeWarmup, bc.JudgeWindow, in, p.name)
		} else {
			fmt.Fprintf(stderr, "bench: vegeta, %d workers, %v warm-up, %v measured\n", bc.Clients, bc.JudgeWarmup, bc.JudgeWindow)
		}
		js := bc.judgeAndReadBack(ctx, c, sides, turns)
		*dst = js[0]
		if p != nil {
			p.judged, p.ran = js[1], true
			if p.rival != nil {
				p.rival.readBack(ctx, p.judged)
			}
		}
	}
}

// judgeAndReadBack runs the sides (judgeSides) and reads back the first
// one's SKUs, from its first URL with c. A window that failed is read back
// too, once its answers may have left units in the store: a 201 given
// before the failure is owed its unit all the same.
func (bc Config) judgeAndReadBack(ctx context.Context, c *client.Client, sides []judgeSide, turns int) []*Judged {
	js := bc.judgeSides(ctx, sides, turns)
	readBackOwed(ctx, c, sides[0].jc.URLs[0], sides[0].jc.SKUs, js[0])
	return js
}

// serviceSide is the side of a judged window that attacks the service's
// instances ins at urls on skus, with their CPU and critical sections.
func (bc Config) serviceSide(urls, skus []string, ins []*procs.Instance) judgeSide {
	pids := make([]int, len(ins))
	for i, in := range ins {
		pids[i] = in.PID()
	}
	return judgeSide{jc: bc.judgeConfig(urls, skus), pids: pids, sections: section.NewMeter(urls, &http.Client{Timeout: 5 * time.Second})}
}

// readBackOwed reads back j's SKUs from base with c, once j's answers may
// have left units in the store: a 201 given before a failure is owed its
// unit all the same.
func readBackOwed(ctx context.Context, c *client.Client, base string, skus []string, j *Judged) {
	if j.Error == "" || j.mayHold() {
		j.Readback = readBack(ctx, c, base, skus, judgeStock, j.Result)
	}
}

// mayHold reports whether the attack had answers that may have left units
// in the store: a 201, or an unsettled answer.
func (j *Judged) mayHold() bool {
	return j.WarmupCreated+j.Created+j.WarmupUnsettled+j.Unsettled > 0
}

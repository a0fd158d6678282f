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

// judgeConfig is the attack of one workload on urls.
func (bc Config) judgeConfig(urls, skus []string) judge.Config {
	return judge.Config{URLs: urls, SKUs: skus, Workers: bc.Clients, Warmup: bc.JudgeWarmup, Window: bc.JudgeWindow,
		KeyPrefix: run.NewRunID(), HoldSeconds: benchHoldSeconds, Seed: bc.Seed, RequestTimeout: 30 * time.Second}
}

// judgeWorkload attacks processes already serving, reading the CPU of
// every class around the window, and, with sections (the service, not the
// floor), the instances' critical sections. pids are the instances' (or
// the floor's). The servers' processes are looked up again for every
// window: one restarted since the last (or its PID reused) would otherwise
// be read as missing, or as some other process.
func (bc Config) judgeWorkload(ctx context.Context, jc judge.Config, pids []int, sections *section.Meter) *Judged {
	servers := bc.findServers()
	meter := cpu.NewMeter(servers.classes(pids))
	var before, after cpu.Snapshot
	var sBefore, sAfter section.Snapshot
	var cpuErr, sErr error
	// The scrapes are outside the CPU's window: before it begins, after it
	// ends.
	scrape := func(into *section.Snapshot) {
		if sections == nil || sErr != nil {
			return
		}
		*into, sErr = sections.Snapshot(ctx)
	}
	jc.OnWindow = func(begin bool) {
		var err error
		if begin {
			scrape(&sBefore)
			before, err = meter.Snapshot()
		} else {
			after, err = meter.Snapshot()
			scrape(&sAfter)
		}
		if err != nil && cpuErr == nil {
			cpuErr = err
		}
	}
	res, err := judge.Attack(ctx, jc)
	j := &Judged{Result: res, ServersMissing: servers.Missing}
	switch {
	case err != nil:
		j.Error = err.Error()
		return j
	case cpuErr != nil:
		j.CPUError = cpuErr.Error()
	default:
		w := meter.Between(before, after, res.Created)
		j.CPU = &w
	}
	switch {
	case sections == nil:
	case sErr != nil:
		j.SectionError = sErr.Error()
	default:
		w := section.Between(sBefore, sAfter, len(jc.SKUs))
		j.Section = &w
	}
	return j
}

// judgeService is compare's AfterRun for one bench run: fresh SKUs of the
// run's workload, the attack, then the read back of those SKUs.
func (bc Config) judgeService(workload string, dst **Judged, stderr io.Writer) func(context.Context, run.Config, []*procs.Instance) {
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
		fmt.Fprintf(stderr, "bench: vegeta, %d workers, %v warm-up, %v measured\n", bc.Clients, bc.JudgeWarmup, bc.JudgeWindow)
		j := bc.judgeWorkload(ctx, bc.judgeConfig(cfg.URLs, skus), pids,
			section.NewMeter(cfg.URLs, &http.Client{Timeout: 5 * time.Second}))
		if j.Error == "" {
			j.Readback = readBack(ctx, c, cfg.URLs[0], skus, judgeStock, j.Result)
		}
		*dst = j
	}
}

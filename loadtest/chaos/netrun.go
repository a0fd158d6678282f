package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/run"
)

// netRun is one run of a partition scenario: the chaos run's record (e)
// and the network it built (rig).
type netRun struct {
	e   *chaosEnv
	rig *netRig
	// victimLost is the victim's stockguard_lock_leases_lost_total when
	// the run started, so the fault's count can be told apart.
	victimLost float64
}

// metricVictimLeasesLost is the Run.Metrics key of the leases the victim
// instance's lock backend saw lost during the run: the lost signal a
// partitioned holder must get.
const metricVictimLeasesLost = metricLockLeasesL + `{instance="victim"}`

// netScenario turns a partition fault into a scenario's run: build the
// network, run the load with the fault in it, measure, tear it all down.
func netScenario(fault func(context.Context, *netRun) error) func(context.Context, *chaosEnv, *Run) error {
	return func(ctx context.Context, e *chaosEnv, out *Run) error {
		return runNet(ctx, e, out, fault)
	}
}

// runNet is execute for a scenario that builds its own network: the same
// phases, on instances inside namespaces. Whatever happens, the topology,
// with every process in it, is gone when it returns.
func runNet(ctx context.Context, e *chaosEnv, out *Run, fault func(context.Context, *netRun) error) (err error) {
	runID := run.NewRunID()
	rig, err := startNet(ctx, e, runID)
	if rig != nil {
		defer func() { out.Notes = append(out.Notes, rig.close()...) }()
	}
	if err != nil {
		return fmt.Errorf("start the network: %w", err)
	}
	n := &netRun{e: e, rig: rig}
	baseline, err := n.scrape(ctx)
	if err != nil {
		out.Notes = append(out.Notes, "metrics before the load: "+err.Error())
	}
	n.victimLost = baseline[n.victim()][metricLockLeasesL]
	out.StartedAt = time.Now().UTC()
	e.load.run(ctx, e.cc.Concurrency, e.cc.Seed)
	run.Sleep(ctx, e.cc.Warmup)
	faultErr := fault(ctx, n)
	if faultErr != nil {
		e.event(EventNote, "fault injection failed: %v", faultErr)
		if herr := rig.topo.Heal(context.WithoutCancel(ctx)); herr != nil {
			e.event(EventNote, "heal after the failed fault: %v", herr)
		}
	}
	run.Sleep(ctx, max(e.cc.Duration, e.lastEventAt()+e.cc.Recovery)-e.load.since())
	e.bg.Wait() // bounded: each background step gives up on its own
	run.Sleep(ctx, e.lastEventAt()+300*time.Millisecond-e.load.since())
	e.load.stop()
	loadFor := e.load.since()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	out.Orders.Reconciled, out.Orders.Unresolved = e.load.reconcile(ctx)
	if e.cc.SellOut {
		units, err := e.load.sellOut(ctx)
		out.SellOutUnits = units
		if err != nil {
			out.Notes = append(out.Notes, err.Error())
		}
	}
	v, err := e.load.verify(ctx, e.cc.Stock, e.plan.fencing == "on")
	if err != nil {
		return err
	}
	each, err := n.scrape(ctx)
	if err != nil {
		out.Notes = append(out.Notes, "metrics: "+err.Error())
	}
	total := map[string]float64{}
	for i := range each {
		for k, x := range each[i] {
			total[k] += x - baseline[i][k]
		}
	}
	e.fill(out, v, total, loadFor)
	out.Metrics[metricVictimLeasesLost] = each[n.victim()][metricLockLeasesL] - n.victimLost
	if faultErr != nil {
		return fmt.Errorf("fault: %w", faultErr)
	}
	return nil
}

// victim is the instance a scenario cuts off: the last, as elsewhere.
func (n *netRun) victim() int { return len(n.rig.ins) - 1 }

// scrape reads the chaos counters of every instance; an instance that does
// not answer gets an empty map.
func (n *netRun) scrape(ctx context.Context) ([]map[string]float64, error) {
	out := make([]map[string]float64, len(n.rig.ins))
	var errs []error
	for i, in := range n.rig.ins {
		m, err := scrapeCounters(ctx, n.e.client, in.url, scrapedMetrics)
		if err != nil {
			errs = append(errs, fmt.Errorf("instance %d: %w", i+1, err))
			m = map[string]float64{}
		}
		out[i] = m
	}
	return out, errors.Join(errs...)
}

// victimLeasesLost is how many leases the victim's backend has seen lost
// since the run started.
func (n *netRun) victimLeasesLost(ctx context.Context) (float64, error) {
	m, err := scrapeCounters(ctx, n.e.client, n.rig.ins[n.victim()].url, []string{metricLockLeasesL})
	if err != nil {
		return 0, err
	}
	return m[metricLockLeasesL] - n.victimLost, nil
}

// stallVictim sends the victim one order per hot SKU that stalls for
// stall between its claim and its write, waits until the first is stalled
// there, and returns a channel closed once every stalled order answered.
func (n *netRun) stallVictim(ctx context.Context, stall time.Duration) <-chan struct{} {
	e, v := n.e, n.victim()
	before := n.pausesLogged(v)
	var answered sync.WaitGroup
	answered.Add(len(e.load.skus))
	done := make(chan struct{})
	e.event(EventNote, "instance %d: %d-unit order on each hot SKU sent with X-Chaos-Pause: %v (stall between claim and write)", v+1, stalledQty, stall)
	e.load.sendPaused(ctx, v, stall, func(sku string, out client.Outcome, took time.Duration) {
		e.event(EventOutcome, "instance %d: stalled order on %s answered %s after %v", v+1, shortSKU(sku), describeOutcome(out), took.Round(time.Millisecond))
		answered.Done()
	})
	go func() {
		answered.Wait()
		close(done)
	}()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for n.pausesLogged(v)-before < 1 {
		if wctx.Err() != nil {
			e.event(EventNote, "no stalled order seen inside the critical section after 5s")
			return done
		}
		run.Sleep(wctx, 10*time.Millisecond)
	}
	e.event(EventNote, "instance %d: a stalled order holds its lease between claim and write", v+1)
	return done
}

func (n *netRun) pausesLogged(i int) int {
	b, err := os.ReadFile(n.rig.ins[i].logPath)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(pauseMarker))
}

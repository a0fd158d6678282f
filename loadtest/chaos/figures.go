package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/run"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// fill computes the run's figures from the outcomes and the verification.
func (e *chaosEnv) fill(run *Run, v run.Verification, metrics map[string]float64, loadFor time.Duration) {
	outs := e.load.snapshot()
	run.DurationS = tally.Round(loadFor.Seconds(), 3)
	run.Verification = v
	for k, x := range metrics {
		run.Metrics[k] = x
	}
	run.StaleWritesRejected = int64(metrics[metricStaleFence])
	run.LatencyMs = e.load.lat.Summary()
	e.mu.Lock()
	run.Events = append(run.Events, e.events...)
	windows, healAt, healed, affected, faultAt := e.windows, e.healAt, e.healed, e.affected, e.faultAt
	e.mu.Unlock()

	o := &run.Orders
	o.ErrorCodes = map[string]int{}
	for _, x := range outs {
		o.Add(x.kind, x.code)
	}
	run.Units = tally.UnitCounts{
		Stock:    int64(e.cc.Stock) * int64(len(e.load.skus)),
		Reserved: v.Sources.Ledger.Units,
		Oversold: v.Oversold,
		Lost:     v.Lost,
	}

	run.Fault.WindowsMs = [][2]float64{}
	for _, w := range windows {
		run.Fault.WindowsMs = append(run.Fault.WindowsMs, [2]float64{ms(w[0]), ms(w[1])})
	}
	if len(windows) > 0 {
		at := ms(faultAt)
		run.Fault.FaultAtMs = &at
	}
	if healed {
		at := ms(healAt)
		run.Fault.HealAtMs = &at
	}
	// An answer counts as given during the fault if its order was sent
	// once the fault was in force and answered before it healed: an order
	// already under way when the fault began says nothing of how the
	// system served under it.
	during := func(x chaosOutcome) bool {
		for _, w := range windows {
			if x.sent >= w[0] && x.done <= w[1] {
				return true
			}
		}
		return false
	}
	var successes []time.Duration
	for _, x := range outs {
		if during(x) {
			switch x.kind {
			case client.KindReserved:
				run.Fault.ReservedDuring++
			case client.KindLockUnavailable:
				run.Fault.LockUnavailableDuring++
			case client.KindStaleFence:
				run.Fault.StaleFenceDuring++
			}
		}
		if x.kind != client.KindReserved {
			continue
		}
		successes = append(successes, x.done)
		if healed && x.done >= healAt && (affected == nil || slices.Contains(affected, x.inst)) {
			r := ms(x.done - healAt)
			if run.RecoveryMs == nil || r < *run.RecoveryMs {
				run.RecoveryMs = &r
			}
		}
	}
	run.LongestGapMs = longestGap(successes, loadFor)
	run.Events = append(run.Events, outcomeEvents(outs, faultAt, len(windows) > 0, healAt, run.RecoveryMs)...)
	slices.SortStableFunc(run.Events, func(a, b Event) int { return cmp.Compare(a.AtMs, b.AtMs) })
	run.BucketMs, run.Timeline = buckets(outs, loadFor)
}

// outcomeEvents marks the first 409 stale_fence and the first 503 after the
// fault began, and the first 201 that counts as recovery.
func outcomeEvents(outs []chaosOutcome, faultAt time.Duration, faulted bool, healAt time.Duration, recovery *float64) []Event {
	if !faulted {
		return nil
	}
	var evs []Event
	first := func(kind client.Kind, what string) {
		var best *chaosOutcome
		for i := range outs {
			if x := &outs[i]; x.kind == kind && x.done >= faultAt && (best == nil || x.done < best.done) {
				best = x
			}
		}
		if best != nil {
			evs = append(evs, Event{AtMs: ms(best.done), Kind: EventOutcome, What: fmt.Sprintf("first %s after the fault (instance %d)", what, best.inst+1)})
		}
	}
	first(client.KindStaleFence, "409 stale_fence")
	first(client.KindLockUnavailable, "503 lock_unavailable")
	if recovery != nil {
		evs = append(evs, Event{AtMs: ms(healAt) + *recovery, Kind: EventOutcome,
			What: fmt.Sprintf("recovered: first 201 from an affected instance %.0f ms after the fault healed", *recovery)})
	}
	return evs
}

// longestGap is the longest stretch of [0, end] without a success.
func longestGap(successes []time.Duration, end time.Duration) float64 {
	slices.Sort(successes)
	var prev, gap time.Duration
	for _, s := range successes {
		gap = max(gap, s-prev)
		prev = s
	}
	return ms(max(gap, end-prev))
}

// buckets slices the load into about 100 intervals of a round length and
// counts the answers received in each.
func buckets(outs []chaosOutcome, total time.Duration) (int, []Bucket) {
	size := 100
	for _, s := range []int{100, 200, 250, 500, 1000, 2000, 5000, 10000} {
		size = s
		if total <= time.Duration(100*s)*time.Millisecond {
			break
		}
	}
	n := int(total/(time.Duration(size)*time.Millisecond)) + 1
	out := make([]Bucket, n)
	for i := range out {
		out[i].AtMs = i * size
	}
	for _, x := range outs {
		i := min(int(x.done/(time.Duration(size)*time.Millisecond)), n-1)
		b := &out[i]
		switch x.kind {
		case client.KindReserved:
			b.Reserved++
		case client.KindStaleFence:
			b.StaleFence++
		case client.KindLockUnavailable:
			b.LockUnavailable++
		case client.KindInsufficient:
			b.Insufficient++
		default:
			b.Other++
		}
	}
	return size, out
}

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/loadtest/history"
	"github.com/stockguard/stockguard/loadtest/run"
)

// Kinds of nemesis steps.
const (
	nemPauseInstance = "pause-instance"   // SIGSTOP an instance, SIGCONT it
	nemKillLock      = "kill-lock-server" // SIGKILL a Redis master, restart it empty
	nemPartition     = "partition"        // blackhole a master's TCP, then reset
	nemPostgres      = "postgres-restart" // fast shutdown and start
	nemClockJump     = "clock-jump"       // a held key expires early on a majority
	nemPauseHolder   = "pause-holder"     // a holder frozen between claim and write
)

// nemesisSeedStream keeps the schedule's random stream apart from the
// load's, which share the run's seed.
const nemesisSeedStream = 0x6e656d65736973

// nemesisStep is one fault of the schedule: after Gap, inject it on Target
// (an instance, a master, or a recorded SKU) for For.
type nemesisStep struct {
	Kind   string
	Gap    time.Duration
	For    time.Duration
	Target int
}

func (s nemesisStep) String() string {
	return fmt.Sprintf("+%v %s #%d for %v", s.Gap.Round(time.Millisecond), s.Kind, s.Target+1, s.For.Round(time.Millisecond))
}

// nemesisSchedule draws the faults of a run from seed alone, so a seed
// replays the same schedule: steps one after the other, with gaps, until
// total; exactly one forced pause of a holder between claim and write (so
// that without the fence there is always a race to lose), at most one
// Postgres restart. holderFor is how long the forced pause freezes the
// holder.
func nemesisSchedule(seed uint64, total, holderFor time.Duration, instances, masters, skus int) []nemesisStep {
	rng := rand.New(rand.NewPCG(seed, nemesisSeedStream))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	// The forced pause comes in the first half, with time left to recover.
	forcedAfter := between(0, max(total/2, time.Millisecond))
	kinds := []string{nemPauseInstance, nemKillLock, nemPartition, nemPostgres, nemClockJump}
	var out []nemesisStep
	var at time.Duration
	forced := false
	for {
		step := nemesisStep{Gap: between(300*time.Millisecond, 1200*time.Millisecond)}
		if !forced && at+step.Gap >= forcedAfter {
			step.Kind, step.For, step.Target = nemPauseHolder, holderFor, rng.IntN(skus)
		} else {
			step.Kind = kinds[rng.IntN(len(kinds))]
			switch step.Kind {
			case nemPauseInstance:
				step.For, step.Target = between(300*time.Millisecond, 2*time.Second), rng.IntN(instances)
			case nemKillLock, nemPartition:
				step.For, step.Target = between(500*time.Millisecond, 2500*time.Millisecond), rng.IntN(masters)
			case nemPostgres:
				step.For = between(300*time.Millisecond, 1500*time.Millisecond)
				kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == nemPostgres }) // at most one restart
			case nemClockJump:
				step.Target = rng.IntN(skus)
			}
		}
		if at+step.Gap+step.For > total {
			if !forced {
				out = append(out, nemesisStep{Kind: nemPauseHolder, Gap: step.Gap, For: holderFor, Target: rng.IntN(skus)})
			}
			return out
		}
		at += step.Gap + step.For
		forced = forced || step.Kind == nemPauseHolder
		out = append(out, step)
	}
}

func nemesisScenario() *scenario {
	return &scenario{
		Name: "nemesis", Backends: []string{"redlock"}, DamageUnfenced: true,
		Summary: "A bounded run (--duration, default 60s) of faults drawn from --seed: instances paused, Redlock masters killed and restarted empty, masters blackholed at TCP level, a Postgres restart, clock jumps, and always one holder frozen between claim and write; recorded clients place, confirm and cancel with idempotent retries, and the history checker judges every answer.",
		setup:   nemesisSetup,
		fault:   nemesis,
		finish:  finishHistory,
		check:   needStaleRejected,
	}
}

// nemesisSetup gives the run its own Postgres and five masters that the
// instances reach through forwarders, which can blackhole one.
func nemesisSetup(ctx context.Context, e *chaosEnv) error {
	if err := e.startPrivatePostgres(ctx); err != nil {
		return err
	}
	var addrs []string
	for i := range 5 {
		r, err := e.newRedis(ctx, fmt.Sprintf("redis%d", i+1))
		if err != nil {
			return err
		}
		f, err := e.newForwarder(r.Addr())
		if err != nil {
			return err
		}
		addrs = append(addrs, f.Addr())
	}
	e.opts.RedisAddrs = strings.Join(addrs, ",")
	return nil
}

func nemesis(ctx context.Context, e *chaosEnv) error {
	rec, err := e.newHistRecorder(ctx, histSKUs, histStock)
	if err != nil {
		return err
	}
	rec.run(ctx, histClients, e.cc.Seed)
	ttl := e.plan.sc.lockTTL(e.cc)
	holderFor := ttl + max(time.Second, ttl/2)
	steps := nemesisSchedule(e.cc.Seed, e.cc.NemesisDuration, holderFor, len(e.ins), len(e.redis), len(rec.skus))
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = s.String()
	}
	e.event(EventNote, "nemesis schedule from seed %d: %s", e.cc.Seed, strings.Join(parts, ", "))
	for _, s := range steps {
		run.Sleep(ctx, s.Gap)
		if ctx.Err() != nil {
			break
		}
		if err := e.nemesisStep(ctx, rec, s); err != nil {
			rec.stop()
			return fmt.Errorf("%s: %w", s.Kind, err)
		}
	}
	run.Sleep(ctx, e.cc.Recovery)
	rec.stop()
	return nil
}

// nemesisStep injects one fault and heals it.
func (e *chaosEnv) nemesisStep(ctx context.Context, rec *histRecorder, s nemesisStep) error {
	var from time.Duration
	heal := func(format string, args ...any) {
		e.heal(nil, format, args...)
		e.window(from, e.healAt)
	}
	switch s.Kind {
	case nemPauseInstance:
		from = e.event(EventFault, "nemesis: SIGSTOP instance %d (pid %d) for %v", s.Target+1, e.pid(s.Target), s.For.Round(time.Millisecond))
		if err := e.freeze(s.Target); err != nil {
			return err
		}
		run.Sleep(ctx, s.For)
		if err := e.thaw(s.Target); err != nil {
			return err
		}
		heal("nemesis: SIGCONT instance %d", s.Target+1)
	case nemKillLock:
		r := e.redis[s.Target]
		from = e.event(EventFault, "nemesis: SIGKILL Redis master %d (%s, pid %d) for %v", s.Target+1, r.Addr(), r.PID(), s.For.Round(time.Millisecond))
		if err := r.Kill(); err != nil {
			return err
		}
		run.Sleep(ctx, s.For)
		if err := r.Restart(ctx); err != nil {
			return err
		}
		heal("nemesis: master %d restarted empty", s.Target+1)
	case nemPartition:
		f := e.fwds[s.Target]
		from = e.event(EventFault, "nemesis: partition Redis master %d from every instance (its TCP blackholed) for %v", s.Target+1, s.For.Round(time.Millisecond))
		f.Hold()
		run.Sleep(ctx, s.For)
		f.Drop() // what was in flight is lost, the connections reset
		f.Release()
		heal("nemesis: partition of master %d healed (held bytes discarded, connections reset)", s.Target+1)
	case nemPostgres:
		pg := e.pg.pg
		from = e.event(EventFault, "nemesis: fast shutdown of Postgres (pid %d) for %v", pg.PID(), s.For.Round(time.Millisecond))
		if err := pg.Stop(); err != nil {
			return err
		}
		run.Sleep(ctx, s.For)
		if err := pg.Start(ctx); err != nil {
			return err
		}
		heal("nemesis: Postgres started again (pid %d)", pg.PID())
	case nemClockJump:
		var addrs []string
		for _, r := range e.redis[:len(e.redis)/2+1] {
			addrs = append(addrs, r.Addr())
		}
		sku := rec.skus[s.Target]
		from = e.event(EventFault, "nemesis: clock jump on a majority of masters: the lock key of %s expires now", shortSKU(sku))
		what, err := expireLocks(ctx, addrs, []string{sku})
		if err != nil {
			return err
		}
		heal("nemesis: %s", what)
	case nemPauseHolder:
		return e.nemesisPauseHolder(ctx, rec, s)
	}
	return nil
}

// nemesisPauseHolder is the forced race: a recorded order stalls between
// its claim and its write on the victim, which is then frozen past the
// lease, while the other instances' clients go on with the same SKU.
func (e *chaosEnv) nemesisPauseHolder(ctx context.Context, rec *histRecorder, s nemesisStep) error {
	v, sku := e.victim(), rec.skus[s.Target]
	before := e.pausesLogged(v)
	e.event(EventNote, "nemesis: recorded %d-unit order on %s sent to instance %d with X-Chaos-Pause: %v", stalledQty, shortSKU(sku), v+1, holderStall)
	rec.placePaused(ctx, histClients, v, sku, stalledQty, holderStall, func(out history.Outcome, took time.Duration) {
		e.event(EventOutcome, "nemesis: the stalled order answered %s %s after %v", out.Result, out.Code, took.Round(time.Millisecond))
	})
	if !e.waitPausing(ctx, v, before, 1, 5*time.Second) {
		return nil // noted by waitPausing; the run goes on without the race
	}
	from := e.event(EventFault, "nemesis: SIGSTOP instance %d (pid %d) for %v, its recorded order between claim and write", v+1, e.pid(v), s.For.Round(time.Millisecond))
	if err := e.freeze(v); err != nil {
		return err
	}
	run.Sleep(ctx, s.For)
	if err := e.thaw(v); err != nil {
		return err
	}
	e.heal(nil, "nemesis: SIGCONT instance %d: its stalled write goes out with the lease long gone", v+1)
	e.window(from, e.healAt)
	return nil
}

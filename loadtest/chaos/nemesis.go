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
	nemKillLock      = "kill-lock-server" // SIGKILL a lock server, restart it (a Redis master empty)
	// Partitions are nftables drop rules inside the run's namespaces.
	nemCutInstance = "partition-instance" // an instance, holder or not, cut off from every lock server
	nemCutMinority = "partition-minority" // a minority of the Redis masters cut off from every other member
	nemCutLeader   = "partition-leader"   // the ZooKeeper leader cut off from every other member
	nemPostgres    = "postgres-restart"   // fast shutdown and start
	nemClockJump   = "clock-jump"         // a held key expires early on a majority
	nemPauseHolder = "pause-holder"       // a holder frozen between claim and write
)

// nemesisStallTries bounds the orders sent to get the forced pause's stall.
const nemesisStallTries = 3

// nemesisSeedStream keeps the schedule's random stream apart from the
// load's, which share the run's seed.
const nemesisSeedStream = 0x6e656d65736973

// nemesisStep is one fault of the schedule: after Gap, inject it on Target
// (an instance, a lock server, the first of the cut masters, or a
// recorded SKU) for For.
type nemesisStep struct {
	Kind   string
	Gap    time.Duration
	For    time.Duration
	Target int
}

func (s nemesisStep) String() string {
	return fmt.Sprintf("+%v %s #%d for %v", s.Gap.Round(time.Millisecond), s.Kind, s.Target+1, s.For.Round(time.Millisecond))
}

// nemesisWorld is what a schedule is drawn for: the backend and how many
// instances, lock servers and recorded SKUs the run has.
type nemesisWorld struct {
	backend                string
	instances, locks, skus int
}

// kinds are the faults the backend's world can take: partitions of a
// minority of masters and clock jumps need Redlock's masters, a leader
// ZooKeeper's ensemble.
func (w nemesisWorld) kinds() []string {
	out := []string{nemPauseInstance, nemKillLock, nemCutInstance, nemPostgres}
	if w.backend == "zookeeper" {
		return append(out, nemCutLeader)
	}
	return append(out, nemCutMinority, nemClockJump)
}

// nemesisSchedule draws the faults of a run from seed alone, so a seed
// replays the same schedule: steps one after the other, with gaps, until
// total; exactly one forced pause of a holder between claim and write (so
// that without the fence there is always a race to lose), at most one
// Postgres restart. holderFor is how long the forced pause freezes the
// holder.
func nemesisSchedule(seed uint64, total, holderFor time.Duration, w nemesisWorld) []nemesisStep {
	rng := rand.New(rand.NewPCG(seed, nemesisSeedStream))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	// The forced pause comes in the first half, with time left to recover.
	forcedAfter := between(0, max(total/2, time.Millisecond))
	kinds := w.kinds()
	var out []nemesisStep
	var at time.Duration
	forced := false
	for {
		step := nemesisStep{Gap: between(300*time.Millisecond, 1200*time.Millisecond)}
		if !forced && at+step.Gap >= forcedAfter {
			step.Kind, step.For, step.Target = nemPauseHolder, holderFor, rng.IntN(w.skus)
		} else {
			step.Kind = kinds[rng.IntN(len(kinds))]
			switch step.Kind {
			case nemPauseInstance:
				step.For, step.Target = between(300*time.Millisecond, 2*time.Second), rng.IntN(w.instances)
			case nemCutInstance:
				step.For, step.Target = between(500*time.Millisecond, 2500*time.Millisecond), rng.IntN(w.instances)
			case nemKillLock, nemCutMinority:
				step.For, step.Target = between(500*time.Millisecond, 2500*time.Millisecond), rng.IntN(w.locks)
			case nemCutLeader:
				step.For = between(500*time.Millisecond, 2500*time.Millisecond)
			case nemPostgres:
				step.For = between(300*time.Millisecond, 1500*time.Millisecond)
				kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == nemPostgres }) // at most one restart
			case nemClockJump:
				step.Target = rng.IntN(w.skus)
			}
		}
		if at+step.Gap+step.For > total {
			if !forced {
				out = append(out, nemesisStep{Kind: nemPauseHolder, Gap: step.Gap, For: holderFor, Target: rng.IntN(w.skus)})
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
		Name: "nemesis", Backends: []string{"redlock", "zookeeper"}, DamageUnfenced: true, net: true,
		Summary: "A bounded run (--duration, default 60s) of faults drawn from --seed, in a network of namespaces the run builds: instances paused, lock servers killed and restarted, partitions (nftables rules: an instance cut off from its lock servers, 2 of 5 Redlock masters cut off from everyone, the ZooKeeper leader cut off), a Postgres restart, clock jumps (Redlock), and always one holder frozen between claim and write; recorded clients place, confirm and cancel with idempotent retries, and the history checker judges every answer.",
		fault:   nemesis,
		finish:  finishHistory,
		check:   needStaleRejected,
	}
}

func nemesis(ctx context.Context, e *chaosEnv) error {
	rec, err := e.newHistRecorder(ctx, histSKUs, histStock)
	if err != nil {
		return err
	}
	rec.run(ctx, histClients, e.cc.Seed)
	expiry, _ := leaseExpiry(e)
	holderFor := pastExpiry(expiry)
	w := nemesisWorld{backend: e.plan.backend, instances: len(e.ins), locks: len(e.net.locks), skus: len(rec.skus)}
	steps := nemesisSchedule(e.cc.Seed, e.cc.NemesisDuration, holderFor, w)
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
	rig := e.net
	var from time.Duration
	heal := func(format string, args ...any) {
		e.heal(nil, format, args...)
		e.window(from, e.healAt)
	}
	// cut holds a partition for s.For, then heals every rule.
	cut := func(a, b []string, format string, args ...any) error {
		from = e.event(EventFault, format, args...)
		if err := rig.topo.Partition(ctx, a, b); err != nil {
			return err
		}
		run.Sleep(ctx, s.For)
		if err := rig.topo.Heal(ctx); err != nil {
			return err
		}
		heal("nemesis: partition healed (%s)", strings.Join(a, ", "))
		return nil
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
		m := rig.locks[s.Target]
		from = e.event(EventFault, "nemesis: SIGKILL lock server %s (%s, pid %d) for %v", m, rig.topo.Member(m).Addr(), rig.lockProcs[s.Target].PID(), s.For.Round(time.Millisecond))
		if err := rig.killLock(s.Target); err != nil {
			return err
		}
		run.Sleep(ctx, s.For)
		if err := rig.restartLock(ctx, s.Target); err != nil {
			return err
		}
		heal("nemesis: %s restarted (a Redis master empty, a ZooKeeper node with its data)", m)
	case nemCutInstance:
		in := rig.ins[s.Target]
		return cut([]string{in.member}, rig.locks, "nemesis: partition instance %d (%s) from the lock servers for %v; it still reaches Postgres and the clients",
			s.Target+1, rig.topo.Member(in.member).Addr(), s.For.Round(time.Millisecond))
	case nemCutMinority:
		n := len(rig.locks)
		minority := make([]string, 0, (n-1)/2)
		for i := range (n - 1) / 2 {
			minority = append(minority, rig.locks[(s.Target+i)%n])
		}
		return cut(minority, rig.others(minority...), "nemesis: partition Redis masters %s (%d of %d) from every other member for %v",
			strings.Join(minority, ", "), len(minority), n, s.For.Round(time.Millisecond))
	case nemCutLeader:
		leader, err := rig.waitZKLeader(ctx, []int{0, 1, 2}, 10*time.Second)
		if err != nil {
			return err
		}
		old := rig.locks[leader]
		return cut([]string{old}, rig.others(old), "nemesis: partition ZooKeeper leader %s (%s) from every other member for %v",
			old, rig.topo.Member(old).Addr(), s.For.Round(time.Millisecond))
	case nemPostgres:
		pg := rig.pg
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
		addrs := rig.lockAddrs(redisPort)
		addrs = addrs[:len(addrs)/2+1]
		sku := rec.skus[s.Target]
		from = e.event(EventFault, "nemesis: clock jump on a majority of masters: the lock key of %s expires now", shortSKU(sku))
		what, err := expireLocks(ctx, rig.dial, addrs, []string{sku})
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
// lease, while the other instances' clients go on with the same SKU. If no
// order reaches its stall in nemesisStallTries tries it fails, fenced or
// not: without the forced race an unfenced run has no race it must lose,
// and a fenced run's refused stale write may be any pause's.
func (e *chaosEnv) nemesisPauseHolder(ctx context.Context, rec *histRecorder, s nemesisStep) error {
	v, sku := e.victim(), rec.skus[s.Target]
	// A victim still recovering from an earlier fault may not get the lock
	// within its lock wait, and the client then retries elsewhere, without
	// the stall: send again, a bounded number of times.
	for try := 1; ; try++ {
		before := e.pausesLogged(v)
		e.event(EventNote, "nemesis: recorded %d-unit order on %s sent to instance %d with X-Chaos-Pause: %v", stalledQty, shortSKU(sku), v+1, holderStall)
		rec.placePaused(ctx, histClients, v, sku, stalledQty, holderStall, func(out history.Outcome, took time.Duration) {
			e.event(EventOutcome, "nemesis: the stalled order answered %s %s after %v", out.Result, out.Code, took.Round(time.Millisecond))
		})
		if e.waitPausing(ctx, v, before, 1, stallStartLimit) {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if try == nemesisStallTries {
			return fmt.Errorf("the forced pause did not happen: no recorded order reached its stall between claim and write on instance %d in %d tries of %v",
				v+1, nemesisStallTries, stallStartLimit)
		}
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

package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/stack"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/run"
)

// The partition scenarios build their own network out of namespaces
// (netenv.go) and cut links with nftables drop rules: the processes keep
// running, their packets vanish.
var (
	// partitionHolderScenario's stalled order keeps its lease watchdog
	// (X-Chaos-Stall: the process runs on, only its packets to the lock
	// servers vanish), so that on every backend the partition is what ends
	// the lease: the renewals (Redis, Redlock) or the session's keepalive
	// (ZooKeeper, etcd) stop reaching the servers.
	partitionHolderScenario = &scenario{
		Name: "partition-holder", Backends: []string{"redis", "redlock", "zookeeper", "etcd"}, DamageUnfenced: true,
		Summary: "Cut the instance holding a lease between claim and write off from its lock servers (it still reaches Postgres and the clients, and goes on renewing its lease in vain) until the lease is lost and another instance holds the lock; its write goes out; heal.",
		net:     true, fault: partitionHolder,
		exercised: func(r *Run) []string {
			// Without the partition the watchdog, or the session's
			// keepalive, would keep the lease through the stall: its loss
			// is the cut's doing.
			switch lost, read := r.Metrics[metricVictimLeasesLost]; {
			case !read:
				return []string{"the partitioned instance's lost leases are unknown: its metrics could not be read"}
			case lost <= 0:
				return []string{"the partitioned instance never saw its lease lost"}
			}
			return nil
		},
		check: func(r *Run) []string { return append(needStaleRejected(r), needRecovery(r)...) },
	}
	partitionLockMinorityScenario = &scenario{
		Name: "partition-lock-minority", Backends: []string{"redlock"},
		Summary: "Cut 2 of the 5 Redlock masters off from everything else (instances, clients, the other masters), then heal: the majority keeps granting locks, so orders keep succeeding.",
		net:     true, fault: partitionLockMinority,
		check: func(r *Run) []string {
			if r.Fault.ReservedDuring == 0 {
				return []string{"no order succeeded while 2 of 5 masters were cut off"}
			}
			return nil
		},
	}
	partitionZKLeaderScenario = &scenario{
		Name: "partition-zk-leader", Backends: []string{"zookeeper"},
		Summary: "Cut the ZooKeeper leader off from the other two nodes and every instance: the majority elects a new leader, sessions move to it, orders resume while the old leader is still cut off; heal.",
		net:     true, fault: partitionZKLeader,
		check: func(r *Run) []string {
			var out []string
			if r.Fault.ReservedDuring == 0 {
				out = append(out, "no order sent after the majority's election succeeded while the old leader was cut off")
			}
			return append(out, needRecovery(r)...)
		},
	}
)

// leaseExpiry is how long a lease outlives its holder's silence on the
// backend of e, and what sets it: the TTL, the ZooKeeper session timeout,
// the etcd session's lease, which etcd counts in whole seconds, or the
// Postgres lock connection's idle_session_timeout (--lock-ttl).
func leaseExpiry(e *chaosEnv) (time.Duration, string) {
	ttl := e.plan.sc.lockTTL(e.cc)
	switch e.plan.backend {
	case "zookeeper":
		return zkSessionTimeout, "ZooKeeper session timeout"
	case "etcd":
		return (ttl + time.Second - 1).Truncate(time.Second), "etcd session TTL"
	case "postgres":
		return ttl, "idle_session_timeout of the lock connection (--lock-ttl)"
	}
	return ttl, "lock TTL"
}

// pastExpiry is how long a holder is frozen or stalled so that its lease,
// lasting expiry, is surely gone by the end: half as long again, at least
// a second more.
func pastExpiry(expiry time.Duration) time.Duration { return expiry + max(time.Second, expiry/2) }

func partitionHolder(ctx context.Context, e *chaosEnv) error {
	rig, v := e.net, e.victim()
	expiry, what := leaseExpiry(e)
	// By the end of the stall the lock servers have let the lease go and
	// another instance claimed the row.
	stall := pastExpiry(expiry)
	answered, err := e.stallVictim(withWatchdog(ctx), stall)
	if err != nil {
		return err
	}
	claimed := e.rowTokens(ctx)
	from := e.event(EventFault, "partition instance %d (%s) from the lock servers (%s) for the rest of its %v stall, past the %s of %v; it still reaches Postgres and the clients",
		v+1, rig.topo.Member(rig.ins[v].member).Addr(), strings.Join(rig.locks, ", "), stall, what, expiry)
	if err := rig.topo.Partition(ctx, []string{rig.ins[v].member}, rig.locks); err != nil {
		return err
	}
	select {
	case <-answered:
	case <-time.After(stall + e.cc.RequestTimeout):
		e.event(EventNote, "the stalled order did not answer within %v", stall+e.cc.RequestTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
	// Unfenced writes leave the tokens alone: the note is for fenced runs.
	if now := e.rowTokens(ctx); now != "" && now != claimed {
		e.event(EventNote, "rows' fence tokens %s when the stall began, %s now: other instances took the lock during the partition", claimed, now)
	}
	lost, err := e.victimLeasesLost(ctx)
	if err != nil {
		return err
	}
	e.event(EventNote, "instance %d's lock backend reports %.0f leases lost (stockguard_lock_leases_lost_total)", v+1, lost)
	if err := rig.topo.Heal(ctx); err != nil {
		return err
	}
	e.heal([]int{v}, "partition healed: instance %d reaches its lock servers again", v+1)
	e.window(from, e.healAt)
	// A ZooKeeper instance must first learn that its session expired and
	// open a new one, which takes seconds on a busy machine: the load goes
	// on until it has placed an order again.
	e.background(func() { e.awaitRecovery(ctx, v, 30*time.Second) })
	return nil
}

// awaitRecovery waits, at most limit, for instance i's first 201 after
// the heal and notes it.
func (e *chaosEnv) awaitRecovery(ctx context.Context, i int, limit time.Duration) {
	e.mu.Lock()
	healAt := e.healAt
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for ctx.Err() == nil {
		for _, o := range e.load.snapshot() {
			if o.inst == i && o.kind == client.KindReserved && o.done >= healAt {
				e.event(EventNote, "instance %d placed an order again, %v after the heal", i+1, (o.done - healAt).Round(time.Millisecond))
				return
			}
		}
		run.Sleep(ctx, 100*time.Millisecond)
	}
	e.event(EventNote, "instance %d placed no order within %v of the heal", i+1, limit)
}

func partitionLockMinority(ctx context.Context, e *chaosEnv) error {
	rig := e.net
	cut := rig.locks[:2]
	down := max(3*time.Second, 3*e.plan.sc.lockTTL(e.cc))
	from := e.event(EventFault, "partition Redis masters %s (2 of %d) from every other member (instances, clients, the other masters) for %v; the servers keep running",
		strings.Join(cut, ", "), len(rig.locks), down)
	start := time.Now()
	if err := rig.topo.Partition(ctx, cut, rig.others(cut...)); err != nil {
		return err
	}
	// Orders going on while masters are "cut off" prove nothing unless the
	// cut holds: the load tester is on the other side of it.
	if err := e.pingAcross(ctx, cut, false); err != nil {
		return err
	}
	run.Sleep(ctx, down-time.Since(start))
	if err := rig.topo.Heal(ctx); err != nil {
		return err
	}
	e.heal(nil, "partition healed: all %d masters reachable again", len(rig.locks))
	e.window(from, e.healAt)
	return e.pingAcross(ctx, cut, true)
}

// pingProbeLimit bounds one PING across a cut: a reachable master answers
// in well under a millisecond, a cut one never.
const pingProbeLimit = time.Second

// pingAcross sends PING from the load tester's member to each Redis of
// masters at once, notes what came back, and fails unless every one
// answered (want) or none did (!want).
func (e *chaosEnv) pingAcross(ctx context.Context, masters []string, want bool) error {
	rig := e.net
	errs := make([]error, len(masters))
	if err := run.ForEach(ctx, len(masters), len(masters), func(ctx context.Context, i int) error {
		pctx, cancel := context.WithTimeout(ctx, pingProbeLimit)
		defer cancel()
		errs[i] = rig.redisPing(pctx, rig.addr(masters[i], redisPort))
		return nil
	}); err != nil {
		return err
	}
	var bad []string
	for i, m := range masters {
		if errs[i] == nil {
			e.event(EventNote, "PING from the load tester to %s: PONG", m)
		} else {
			e.event(EventNote, "PING from the load tester to %s: no answer within %v (%v)", m, pingProbeLimit, errs[i])
		}
		if (errs[i] == nil) != want {
			bad = append(bad, m)
		}
	}
	switch {
	case len(bad) == 0:
		return nil
	case want:
		return fmt.Errorf("after the heal, %s did not answer PING from the load tester", strings.Join(bad, ", "))
	}
	return fmt.Errorf("the cut did not hold: %s answered PING from the load tester", strings.Join(bad, ", "))
}

func partitionZKLeader(ctx context.Context, e *chaosEnv) error {
	rig := e.net
	all := []int{0, 1, 2}
	leader, err := rig.waitZKLeader(ctx, all, 10*time.Second)
	if err != nil {
		return err
	}
	old := rig.locks[leader]
	e.event(EventFault, "isolate ZooKeeper leader %s (%s) from the other nodes and every instance; it keeps running",
		old, rig.topo.Member(old).Addr())
	if err := rig.topo.Isolate(ctx, old); err != nil {
		return err
	}
	var rest []int
	for _, i := range all {
		if i != leader {
			rest = append(rest, i)
		}
	}
	next, err := rig.waitZKLeader(ctx, rest, 30*time.Second)
	if err != nil {
		return err
	}
	// The in-fault figures count from here: orders sent once the majority
	// has a leader of its own, while the old one is still cut off, not
	// orders already under way when the cut began.
	elected := e.event(EventNote, "%s elected leader by the majority side", rig.locks[next])
	// Held for a session timeout more: sessions that were on the old
	// leader must move to the majority or expire, and orders run on them
	// while the old leader is still cut off.
	run.Sleep(ctx, zkSessionTimeout)
	if err := rig.topo.Heal(ctx); err != nil {
		return err
	}
	e.heal(nil, "partition healed: %s reachable again", old)
	e.window(elected, e.healAt)
	e.background(func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for wctx.Err() == nil {
			if mode, err := stack.ZKModeDial(wctx, rig.dial, rig.addr(old, zkClientPort)); err == nil {
				e.event(EventNote, "old leader %s back in the ensemble as %s", old, mode)
				return
			}
			run.Sleep(wctx, 200*time.Millisecond)
		}
		e.event(EventNote, "old leader %s did not rejoin within 30s", old)
	})
	return nil
}

// rowTokens lists the hot SKUs' fence tokens as the store has them, e.g.
// "s00000=812"; empty if a read fails (the figure is a note, not a check).
func (e *chaosEnv) rowTokens(ctx context.Context) string {
	parts := make([]string, 0, len(e.load.skus))
	for _, sku := range e.load.skus {
		st, err := e.client.GetSKU(ctx, e.ins[0].baseURL(), sku)
		if err != nil {
			return ""
		}
		parts = append(parts, fmt.Sprintf("%s=%d", shortSKU(sku), st.FenceToken))
	}
	return strings.Join(parts, " ")
}

package chaos

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/lock/zklock/zkwire"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/run"
)

// Kinds of timeline events.
const (
	EventFault = "fault" // a fault is injected
	EventHeal  = "heal"  // a fault is over
	EventNote  = "note"  // an observation: a token, an election, a new session
	// EventOutcome is an answer worth a mark: a stalled order's, the first
	// 409 stale_fence or 503 after the fault, the first 201 after it healed.
	EventOutcome = "outcome"
)

// Event is one entry of a run's timeline, timed from the start of the
// order load.
type Event struct {
	AtMs float64 `json:"at_ms"`
	Kind string  `json:"kind"`
	What string  `json:"what"`
}

// zkSessionTimeout is the service's ZooKeeper session timeout (the zookeeper
// backend's default, which --lock-ttl does not change): how long a frozen
// instance keeps its locks there.
const zkSessionTimeout = 4 * time.Second

// Stalls asked of paused orders with X-Chaos-Pause.
const (
	// holderStall only has to outlast the moment between seeing the stall
	// begin in the instance's log and the SIGSTOP that freezes it there.
	holderStall = time.Second
	// expiryStall keeps the holder inside its critical section while its
	// session is expired from outside and another instance takes over.
	expiryStall = 1500 * time.Millisecond
	// failoverStall is shorter than failoverTTL: the lease is still valid
	// when the stalled holder writes, so any overlap is the failover's doing.
	failoverStall = 1200 * time.Millisecond
	failoverTTL   = 2 * time.Second
)

// scenario is one fault and what the run must show with and without the fence.
type scenario struct {
	Name     string
	Backends []string
	Summary  string
	// DamageUnfenced: with fencing off the run must show oversold or lost
	// units, or it did not exercise the race it is about.
	DamageUnfenced bool
	// ttl is the --lock-ttl of the instances; nil means --lock-ttl.
	ttl func(cc Config) time.Duration
	// setup starts the lock servers; nil means those of the backend.
	setup func(ctx context.Context, e *chaosEnv) error
	// fault injects the fault while the load runs, and heals it.
	fault func(ctx context.Context, e *chaosEnv) error
	// exercised lists what a run, fenced or not, must show to have had
	// its fault at all (a 503 while a quorum was down, a session the
	// instance saw expire): without it neither "safe" nor "no damage"
	// means anything.
	exercised func(r *Run) []string
	// always lists what a run, fenced or not, must show of the promises
	// the fence plays no part in: a same-key retry returns the first
	// order, one key makes one order (the unique index on the key decides
	// that, not the lock).
	always func(r *Run) []string
	// check lists what else a fenced run must show: that the fence held
	// and the service came through (a stale write refused, orders served
	// during the fault, recovery after it).
	check func(r *Run) []string
	// finish runs once the instances have stopped, whatever happened, and
	// before the servers do: it reads the final state and checks the
	// recorded history into r.History.
	finish func(ctx context.Context, e *chaosEnv, r *Run)
	// net: the run builds its own network of namespaces (netenv.go) for
	// its servers and instances, and setup is not used; the partitioning
	// scenarios' faults cut its links.
	net bool
}

func (s *scenario) lockTTL(cc Config) time.Duration {
	if s.ttl != nil {
		return s.ttl(cc)
	}
	return cc.LockTTL
}

// scenarios in the order `--scenario=all` runs them; those of one system
// come from their own file (etcdScenarios: etcd.go).
var scenarios = append([]*scenario{
	{
		Name: "pause-holder", Backends: []string{"redis", "redlock", "zookeeper", "etcd", "postgres"}, DamageUnfenced: true,
		Summary: "SIGSTOP one instance while it holds leases, with orders stalled between claim and write, for longer than the lease lasts; then SIGCONT.",
		fault:   pauseHolder,
		check:   needStaleRejected,
	},
	{
		Name: "kill-redis-minority", Backends: []string{"redlock"},
		Summary: "SIGKILL 2 of the 5 Redlock masters mid-run, restart them empty later: a majority remains, so orders keep succeeding.",
		fault:   killRedis(2),
		check: func(r *Run) []string {
			if r.Fault.ReservedDuring == 0 {
				return []string{"no order succeeded while 2 of 5 masters were down"}
			}
			return nil
		},
	},
	{
		Name: "kill-redis-majority", Backends: []string{"redlock"},
		Summary: "SIGKILL 3 of the 5 Redlock masters mid-run, restart them empty later: no quorum, so 503 lock_unavailable until the restart.",
		fault:   killRedis(3),
		exercised: func(r *Run) []string {
			if r.Fault.LockUnavailableDuring == 0 {
				return []string{"no 503 lock_unavailable while 3 of 5 masters were down: the quorum was never lost"}
			}
			return nil
		},
		check: needRecovery,
	},
	{
		Name: "kill-zk-node", Backends: []string{"zookeeper"},
		Summary: "SIGKILL a ZooKeeper follower and restart it, then the leader: sessions move to the surviving nodes and locks keep working after the election.",
		fault:   killZKNode,
		check:   needRecovery,
	},
	{
		Name: "zk-session-expiry", Backends: []string{"zookeeper"}, DamageUnfenced: true,
		Summary: "Expire one instance's ZooKeeper session from outside (a second client presents its id and password, then closes it) while it holds leases between claim and write.",
		fault:   zkSessionExpiry,
		exercised: func(r *Run) []string {
			if r.Metrics[metricZKSessLost] == 0 {
				return []string{"the instance never noticed its session expired"}
			}
			return nil
		},
		check: func(r *Run) []string { return append(needStaleRejected(r), needRecovery(r)...) },
	},
	{
		Name: "redis-failover", Backends: []string{"redis"}, DamageUnfenced: true,
		Summary: "A single Redis master with a lagging replica: kill the master while a holder sits between claim and write, promote the replica, which never saw the lock or the token counter, and move the clients to it.",
		ttl:     func(cc Config) time.Duration { return max(cc.LockTTL, failoverTTL) },
		setup:   failoverSetup,
		fault:   redisFailover,
		check:   needStaleRejected,
	},
	postgresRestartScenario(),
	lostCommitAckScenario(),
	clockJumpScenario(),
	nemesisScenario(),
	partitionHolderScenario,
	partitionLockMinorityScenario,
	partitionZKLeaderScenario,
}, etcdScenarios...)

// Scenarios names the scenarios of `load chaos`, in the order
// --scenario=all runs them.
var Scenarios = func() []string {
	out := make([]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.Name
	}
	return out
}()

// PrintScenarios writes one line per scenario: its name and summary.
func PrintScenarios(w io.Writer) {
	for _, s := range scenarios {
		fmt.Fprintf(w, "  %-24s %s\n", s.Name, s.Summary)
	}
}

func scenarioByName(name string) *scenario {
	for _, s := range scenarios {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func needStaleRejected(r *Run) []string {
	if r.StaleWritesRejected == 0 && r.Orders.StaleFence == 0 {
		return []string{"no stale write was rejected: the scenario did not exercise the race"}
	}
	return nil
}

func needRecovery(r *Run) []string {
	if r.RecoveryMs == nil {
		return []string{"no order succeeded after the fault healed"}
	}
	return nil
}

// victim is the instance a scenario pauses or expires: the last one, so that
// verification, which reads from the first, never waits on it.
func (e *chaosEnv) victim() int { return len(e.ins) - 1 }

// stallVictim sends the victim one order per hot SKU that stalls for stall
// between its claim and its write, waits until the first is stalled there,
// and returns a channel closed once every stalled order answered. Only the
// first: the others may queue behind a two-line order that holds one SKU
// while it waits for the stalled one, and the fault must land while a
// stall is on. If none stalls within stallStartLimit it fails: a fault
// injected then tests nothing. Under withWatchdog the stalled leases keep
// their watchdog (X-Chaos-Stall).
func (e *chaosEnv) stallVictim(ctx context.Context, stall time.Duration) (<-chan struct{}, error) {
	v := e.victim()
	before := e.pausesLogged(v)
	var answered sync.WaitGroup
	answered.Add(len(e.load.skus))
	done := make(chan struct{})
	e.event(EventNote, "instance %d: %d-unit order on each hot SKU sent with %s: %v (stall between claim and write)", v+1, stalledQty, stallHeader(ctx), stall)
	e.load.sendPaused(ctx, v, stall, func(sku string, out client.Outcome, took time.Duration) {
		e.event(EventOutcome, "instance %d: stalled order on %s answered %s after %v", v+1, shortSKU(sku), describeOutcome(out), took.Round(time.Millisecond))
		answered.Done()
	})
	go func() {
		answered.Wait()
		close(done)
	}()
	if !e.waitPausing(ctx, v, before, 1, stallStartLimit) {
		return done, fmt.Errorf("instance %d: no stalled order reached its stall between claim and write within %v", v+1, stallStartLimit)
	}
	e.event(EventNote, "instance %d: a stalled order holds its lease between claim and write", v+1)
	return done, nil
}

// stallStartLimit bounds the wait for a stalled order to reach its stall:
// it queues behind the orders the victim is serving, a few milliseconds
// each.
const stallStartLimit = 5 * time.Second

func pauseHolder(ctx context.Context, e *chaosEnv) error {
	v := e.victim()
	expiry, what := leaseExpiry(e)
	stopFor := pastExpiry(expiry)
	if _, err := e.stallVictim(ctx, holderStall); err != nil {
		return err
	}
	from := e.event(EventFault, "SIGSTOP instance %d (pid %d) for %v, past the %s of %v, its stalled holders between claim and write",
		v+1, e.pid(v), stopFor, what, expiry)
	if err := e.freeze(v); err != nil {
		return err
	}
	run.Sleep(ctx, stopFor)
	if err := e.thaw(v); err != nil {
		return err
	}
	e.heal([]int{v}, "SIGCONT instance %d: its stalled writes go out with leases long gone", v+1)
	e.window(from, e.healAt)
	return nil
}

func killRedis(k int) func(context.Context, *chaosEnv) error {
	return func(ctx context.Context, e *chaosEnv) error {
		down := max(2*time.Second, 2*e.cc.LockTTL)
		n, quorum := len(e.redis), len(e.redis)/2+1
		var which []string
		for _, r := range e.redis[:k] {
			which = append(which, fmt.Sprintf("%s pid %d", r.Addr(), r.PID()))
		}
		from := e.event(EventFault, "SIGKILL %d of %d Redis masters (%s) for %v", k, n, strings.Join(which, ", "), down)
		for _, r := range e.redis[:k] {
			if err := r.Kill(); err != nil {
				return err
			}
		}
		run.Sleep(ctx, down)
		// One by one: the fault heals when a quorum is up again, which for
		// a lost majority is before the last node is back.
		healed := false
		for i, r := range e.redis[:k] {
			if err := r.Restart(ctx); err != nil {
				return err
			}
			up := n - k + i + 1
			what := fmt.Sprintf("master %s restarted empty (no persistence: its locks and fence counters are gone); %d of %d up", r.Addr(), up, n)
			if !healed && (up == quorum && n-k < quorum || i == k-1) {
				healed = true
				e.heal(nil, "%s", what)
				e.window(from, e.healAt)
				continue
			}
			e.event(EventHeal, "%s", what)
		}
		return nil
	}
}

// leaderWait bounds each wait for a ZooKeeper or etcd leader: an election
// takes well under a second here, a JVM that boots on a busy machine a few.
const leaderWait = 15 * time.Second

// zkLeader waits, at most leaderWait, for the ensemble to have a leader.
func (e *chaosEnv) zkLeader(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	i, err := e.zk.WaitLeader(ctx)
	if err != nil {
		return -1, fmt.Errorf("no ZooKeeper leader within %v: %w", leaderWait, err)
	}
	return i, nil
}

func killZKNode(ctx context.Context, e *chaosEnv) error {
	leader, err := e.zkLeader(ctx)
	if err != nil {
		return err
	}
	// The follower is down for as long as a JVM takes to come back (seconds
	// on a small machine); the leader is killed only once it serves again,
	// or the two faults would add up to a lost quorum.
	f := (leader + 1) % 3
	from := e.event(EventFault, "SIGKILL ZooKeeper follower %d (%s, pid %d); restart it at once", f+1, e.zk.Node(f).Addr(), e.zk.Node(f).PID())
	if err := e.zk.Node(f).Kill(); err != nil {
		return err
	}
	if err := e.zk.Node(f).Restart(ctx); err != nil {
		return err
	}
	e.window(from, e.event(EventHeal, "follower %d restarted and back in the ensemble", f+1))
	run.Sleep(ctx, 500*time.Millisecond)

	if leader, err = e.zkLeader(ctx); err != nil {
		return err
	}
	old := e.zk.Node(leader)
	from = e.event(EventFault, "SIGKILL ZooKeeper leader %d (%s, pid %d)", leader+1, old.Addr(), old.PID())
	if err := old.Kill(); err != nil {
		return err
	}
	next, err := e.zkLeader(ctx)
	if err != nil {
		return err
	}
	e.heal(nil, "node %d elected leader: the ensemble serves writes again; restarting the old leader", next+1)
	e.window(from, e.healAt)
	// The old leader boots while the load recovers; the run waits for it.
	e.background(func() {
		if err := old.Restart(ctx); err != nil {
			e.event(EventNote, "old leader %d did not come back: %v", leader+1, err)
			return
		}
		e.event(EventHeal, "old leader %d restarted, back as a follower", leader+1)
	})
	return nil
}

func zkSessionExpiry(ctx context.Context, e *chaosEnv) error {
	v := e.victim()
	if _, err := e.stallVictim(ctx, expiryStall); err != nil {
		return err
	}
	// Read after the stall began: this is the session the stalled leases live in.
	id, passwd, err := zkSessionOf(ctx, e.client, e.ins[v].baseURL())
	if err != nil {
		return err
	}
	from := e.event(EventFault, "expire instance %d's ZooKeeper session %#x: a second client presents its id and password, then closes it", v+1, id)
	// A second client presents the session's id and password, which moves
	// the session to it, then closes it: as a partition longer than the
	// session timeout would, the ensemble deletes the lock nodes at once.
	if err := zkwire.ExpireSession(ctx, e.zk.Servers()[0], id, passwd); err != nil {
		return err
	}
	e.heal([]int{v}, "session %#x closed on the ensemble, its lock nodes deleted; instance %d must find out and start a new one", id, v+1)
	e.window(from, from+expiryStall)
	return e.awaitNewZKSession(ctx, v, id, newSessionLimit)
}

// newSessionLimit bounds zk-session-expiry's wait for the instance to
// show a new session, the requests' own time included.
const newSessionLimit = 10 * time.Second

// awaitNewZKSession waits, at most limit in all, for instance v to show a
// ZooKeeper session other than old, and fails if it does not.
func (e *chaosEnv) awaitNewZKSession(ctx context.Context, v int, old int64, limit time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		next, _, err := zkSessionOf(wctx, e.client, e.ins[v].baseURL())
		if err == nil && next != old {
			e.event(EventNote, "instance %d in a new session %#x", v+1, next)
			return nil
		}
		last = err
		run.Sleep(wctx, 100*time.Millisecond)
		if wctx.Err() != nil {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	e.event(EventNote, "instance %d showed no new session within %v", v+1, limit)
	if last != nil {
		return fmt.Errorf("instance %d showed no new session within %v of its expiry (last answer: %v)", v+1, limit, last)
	}
	return fmt.Errorf("instance %d showed no new session within %v of its expiry: still in session %#x", v+1, limit, old)
}

// describeOutcome names an answer for the timeline: "201 (token 812)",
// "409 stale_fence", "no answer (timeout)".
func describeOutcome(out client.Outcome) string {
	switch {
	case out.Kind == client.KindReserved && out.Order != nil && len(out.Order.Lines) > 0:
		return fmt.Sprintf("201 (token %d)", out.Order.Lines[0].FenceToken)
	case out.Status == 0:
		return "no answer (" + out.Code + ")"
	}
	return fmt.Sprintf("%d %s", out.Status, out.Code)
}

// shortSKU drops the run prefix of a SKU name: "lt3f…-s00001" → "s00001".
func shortSKU(sku string) string {
	if i := strings.LastIndexByte(sku, '-'); i >= 0 {
		return sku[i+1:]
	}
	return sku
}

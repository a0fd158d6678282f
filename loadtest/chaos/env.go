package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/stack"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/procs"
	"github.com/stockguard/stockguard/loadtest/progress"
	"github.com/stockguard/stockguard/loadtest/run"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// chaosEnv is what one chaos run owns: its lock servers (never the shared
// stack's, which other runs and tests use), its service instances, its load,
// and the record of what happened when.
type chaosEnv struct {
	cc   Config
	plan chaosPlan
	dir  string
	prog *progress.Bar

	opts  procs.ServeOptions
	redis []*stack.Redis
	zk    *stack.ZKEnsemble
	etcd  *stack.EtcdCluster
	// failover is the redis-failover topology, nil in other scenarios.
	failover *failoverRig
	// pg is the private Postgres (and proxy) of the Postgres scenarios,
	// hist the recorded history of the scenarios that check one; nil in
	// the others.
	pg   *pgRig
	hist *histRecorder
	fwds []*forwarder
	// ins are the service instances in order, procs those of them on
	// loopback, net the network a namespaced run built (nil on loopback).
	ins   []instance
	procs []*procs.Instance
	net   *netRig
	// victimLost is the victim's stockguard_lock_leases_lost_total when
	// the load started, so that the fault's count can be told apart.
	victimLost float64
	load       *chaosLoad
	client     *client.Client // admin calls: creating SKUs, metrics, debug endpoints

	mu      sync.Mutex
	events  []Event
	frozen  map[int]bool // instances under SIGSTOP
	faultAt time.Duration
	healAt  time.Duration
	healed  bool
	// affected are the instances the time to recover is measured on; nil
	// means any.
	affected []int
	windows  [][2]time.Duration // faults in force, for the in-fault figures
	bg       sync.WaitGroup     // fault steps that finish while the load recovers
}

// background runs a fault step, such as a server restart, while the load
// goes on; the run waits for it before it stops the load.
func (e *chaosEnv) background(fn func()) { e.bg.Go(fn) }

func newChaosEnv(cc Config, p chaosPlan, dir string, prog *progress.Bar) *chaosEnv {
	token := strings.ReplaceAll(uuid.NewString(), "-", "")
	admin := client.New(8, token, 10*time.Second)
	return &chaosEnv{
		cc: cc, plan: p, dir: dir, prog: prog, frozen: map[int]bool{},
		opts: procs.ServeOptions{
			Bin: cc.Bin, Lock: p.backend, Fencing: p.fencing, LockTTL: p.sc.lockTTL(cc).String(),
			AdminToken: token, DatabaseURL: cc.DatabaseURL, LogDir: dir,
			// The reaper is kept out of the run: in a shared database it would
			// try to expire other runs' old holds, whose rows carry tokens of
			// another backend's token space, and count every refusal as a
			// stale write. The run's own holds outlast it anyway.
			Extra: []string{"--chaos", "--lock-wait=" + cc.LockWait.String(), "--reap-interval=1h"},
		},
		client: admin,
	}
}

// startServers starts the lock servers the backend needs, on free ports
// under the run's directory, and points the instances at them.
func (e *chaosEnv) startServers(ctx context.Context) error {
	switch e.plan.backend {
	case "redis":
		return e.startRedis(ctx, 1)
	case "redlock":
		return e.startRedis(ctx, 5)
	case "zookeeper":
		zk, err := stack.StartZKEnsemble(ctx, filepath.Join(e.dir, "zk"), 3)
		if err != nil {
			return err
		}
		e.zk = zk
		e.opts.ZKServers = strings.Join(zk.Servers(), ",")
	case "etcd":
		return e.startEtcd(ctx)
	}
	return nil // postgres: the shared database is the lock server
}

func (e *chaosEnv) startRedis(ctx context.Context, n int) error {
	var addrs []string
	for i := range n {
		r, err := e.newRedis(ctx, fmt.Sprintf("redis%d", i+1))
		if err != nil {
			return err
		}
		addrs = append(addrs, r.Addr())
	}
	e.opts.RedisAddrs = strings.Join(addrs, ",")
	return nil
}

// newRedis starts one redis-server that the run owns and closes.
func (e *chaosEnv) newRedis(ctx context.Context, name string, opts ...stack.RedisOption) (*stack.Redis, error) {
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r, err := stack.StartRedis(ctx, dir, opts...)
	if err != nil {
		return nil, err
	}
	e.redis = append(e.redis, r)
	return r, nil
}

// newForwarder starts a forwarder that the run owns and closes.
func (e *chaosEnv) newForwarder(upstream string) (*forwarder, error) {
	f, err := newForwarder(upstream)
	if err != nil {
		return nil, err
	}
	e.fwds = append(e.fwds, f)
	return f, nil
}

// startInstances starts the service instances and creates the run's SKUs.
func (e *chaosEnv) startInstances(ctx context.Context, runID string) error {
	ins, err := procs.Start(ctx, e.opts, e.cc.Instances, e.cc.StartupTimeout)
	if err != nil {
		return err
	}
	e.addLoop(ins)
	urls := e.urls()
	skus := make([]string, e.cc.SKUs)
	for i := range skus {
		skus[i] = run.SKUName(runID, i)
	}
	e.load = newChaosLoad(urls, skus, runID, e.cc.Concurrency, e.cc.RequestTimeout)
	return run.ForEach(ctx, len(skus), 4, func(ctx context.Context, i int) error {
		_, err := e.client.PutSKU(ctx, urls[i%len(urls)], skus[i], e.cc.Stock)
		return err
	})
}

// event records something that happened, timed from the start of the load.
func (e *chaosEnv) event(kind, format string, args ...any) time.Duration {
	var at time.Duration
	if e.load != nil && !e.load.start.IsZero() {
		at = e.load.since()
	}
	what := fmt.Sprintf(format, args...)
	e.mu.Lock()
	e.events = append(e.events, Event{AtMs: ms(at), Kind: kind, What: what})
	if kind == EventFault && e.faultAt == 0 {
		e.faultAt = at
	}
	e.mu.Unlock()
	e.prog.Describe(fmt.Sprintf("%s: %s at +%.1fs", e.plan.name(), kind, at.Seconds()))
	e.prog.Printf("   +%6.2fs %-5s %s\n", at.Seconds(), kind, what)
	return at
}

// heal records that the fault is over: the time to recover counts from
// here, on the affected instances (nil: any).
func (e *chaosEnv) heal(affected []int, format string, args ...any) {
	at := e.event(EventHeal, format, args...)
	e.mu.Lock()
	e.healAt, e.healed, e.affected = at, true, affected
	e.mu.Unlock()
}

// window records that a fault was in force from from to to.
func (e *chaosEnv) window(from, to time.Duration) {
	e.mu.Lock()
	e.windows = append(e.windows, [2]time.Duration{from, to})
	e.mu.Unlock()
}

// freeze SIGSTOPs instance i: the whole process stops at once, as in a long
// GC pause or a VM migration, with its requests in flight and its lease
// renewals stopped.
func (e *chaosEnv) freeze(i int) error {
	if err := e.ins[i].signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP instance %d: %w", i+1, err)
	}
	e.mu.Lock()
	e.frozen[i] = true
	e.mu.Unlock()
	return nil
}

// thaw SIGCONTs instance i.
func (e *chaosEnv) thaw(i int) error {
	e.mu.Lock()
	delete(e.frozen, i)
	e.mu.Unlock()
	if err := e.ins[i].signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGCONT instance %d: %w", i+1, err)
	}
	return nil
}

// thawAll SIGCONTs every frozen instance.
func (e *chaosEnv) thawAll() {
	e.mu.Lock()
	var frozen []int
	for i := range e.frozen {
		frozen = append(frozen, i)
	}
	e.mu.Unlock()
	for _, i := range frozen {
		_ = e.thaw(i)
	}
}

// pid is instance i's process id.
func (e *chaosEnv) pid(i int) int { return e.ins[i].pid() }

// pauseMarker is what an instance logs when a request starts its
// X-Chaos-Pause stall (inventory's critical section, after the claim).
const pauseMarker = "chaos: pausing"

// waitPausing waits until instance i has logged want more pause starts than
// before (as counted by pausesLogged), that is, until that many requests sit
// between their claim and their write. It gives up after limit and says so:
// the scenario then goes on with whatever is in flight.
func (e *chaosEnv) waitPausing(ctx context.Context, i, before, want int, limit time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		if e.pausesLogged(i)-before >= want {
			return true
		}
		if ctx.Err() != nil {
			e.event(EventNote, "only %d of %d paused orders seen inside the critical section after %v",
				e.pausesLogged(i)-before, want, limit)
			return false
		}
		run.Sleep(ctx, 10*time.Millisecond)
	}
}

func (e *chaosEnv) pausesLogged(i int) int {
	b, err := os.ReadFile(e.ins[i].logFile())
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(pauseMarker))
}

// stopInstances stops the instances, thawed first so that they can drain.
// Problems are recorded as notes: the run's figures are already taken.
func (e *chaosEnv) stopInstances() []string {
	var notes []string
	e.thawAll()
	if err := procs.StopAll(e.procs); err != nil {
		notes = append(notes, "stopping instances: "+err.Error())
	}
	e.procs = nil
	if e.net != nil {
		notes = append(notes, e.net.stopInstances()...)
	}
	return notes
}

// teardown stops everything the run started, instances first, then
// forwarders and servers, then the network with whatever still runs in
// it.
func (e *chaosEnv) teardown() []string {
	notes := e.stopInstances()
	for _, f := range e.fwds {
		_ = f.Close()
	}
	for _, r := range e.redis {
		_ = r.Close()
	}
	if e.zk != nil {
		_ = e.zk.Close()
	}
	if e.etcd != nil {
		_ = e.etcd.Close()
	}
	if e.pg != nil {
		e.pg.close()
	}
	if e.net != nil {
		notes = append(notes, e.net.close()...)
	}
	e.client.Close()
	if e.load != nil {
		e.load.client.Close()
	}
	return notes
}

// scrape reads the chaos counters of every instance; an instance that
// does not answer gets an empty map.
func (e *chaosEnv) scrape(ctx context.Context) ([]map[string]float64, error) {
	out := make([]map[string]float64, len(e.ins))
	var errs []error
	for i, in := range e.ins {
		m, err := scrapeCounters(ctx, e.client, in.baseURL(), scrapedMetrics)
		if err != nil {
			errs = append(errs, fmt.Errorf("instance %d: %w", i+1, err))
			m = map[string]float64{}
		}
		out[i] = m
	}
	return out, errors.Join(errs...)
}

// newClient is a client of the instances, with its connections opened
// from the load tester's member in a namespaced run; wrap, when set, wraps
// its transport.
func (e *chaosEnv) newClient(idle int, adminToken string, timeout time.Duration, wrap func(http.RoundTripper) http.RoundTripper) *client.Client {
	if e.net != nil {
		return e.net.httpClient(idle, adminToken, timeout, wrap)
	}
	c := client.New(idle, adminToken, timeout)
	if wrap != nil {
		c.WrapTransport(wrap)
	}
	return c
}

func ms(d time.Duration) float64 { return tally.Round(float64(d)/float64(time.Millisecond), 3) }

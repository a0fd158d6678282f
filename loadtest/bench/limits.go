package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/stockguard/stockguard/internal/cliflag"
	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/loadtest/bench/floor"
	"github.com/stockguard/stockguard/loadtest/bench/naive"
	"github.com/stockguard/stockguard/loadtest/compare"
)

// Limits are the limits measured next to one backend's runs, under the
// same conditions: the store's spread ceiling before its spread runs, and
// for the backends the issue compares with them, the naive loop of the
// matching library and the HTTP floor.
type Limits struct {
	Backend       string         `json:"backend"`
	Round         int            `json:"round,omitempty"`
	SpreadCeiling *CeilingSample `json:"spread_ceiling,omitempty"`
	NaiveHot      *naive.Result  `json:"naive_hot,omitempty"`
	NaiveSpread   *naive.Result  `json:"naive_spread,omitempty"`
	Floor         *Judged        `json:"floor,omitempty"`
	// Errors are the limits that could not be measured.
	Errors []string `json:"errors,omitempty"`
}

func (l Limits) round() int { return l.Round }

// naiveLibrary is the backend whose naive counterpart a library is.
var naiveLibrary = map[string]string{"redlock": "go-redsync", "zookeeper": "go-zookeeper zk.Lock"}

// floorBackends are the backends whose hot SKU is compared with the floor.
var floorBackends = []string{"redlock", "zookeeper"}

// limitsKit holds what the limits share across backends: the naive
// loops' table and lock clients, opened when first needed.
type limitsKit struct {
	bc      Config
	table   *naive.Table
	lockers map[string]naive.Locker
	closers []func()
}

func (k *limitsKit) close() {
	for _, c := range slices.Backward(k.closers) {
		c()
	}
}

// locker opens the naive library of backend.
func (k *limitsKit) locker(ctx context.Context, backend string) (naive.Locker, error) {
	if l, ok := k.lockers[backend]; ok {
		return l, nil
	}
	if k.table == nil {
		t, err := naive.OpenTable(ctx, cmp.Or(k.bc.DatabaseURL, compare.DefaultDatabaseURL), k.bc.SpreadSKUs, k.bc.Clients)
		if err != nil {
			return nil, err
		}
		k.table = t
		k.closers = append(k.closers, t.Close)
	}
	var l naive.Locker
	switch backend {
	case "redlock":
		r, err := naive.NewRedsync(ctx, orStack(k.bc.RedisAddrs, stack.RedisAddrs()))
		if err != nil {
			return nil, err
		}
		l = r
		k.closers = append(k.closers, r.Close)
	case "zookeeper":
		z, err := naive.NewZooKeeper(ctx, orStack(k.bc.ZKServers, stack.ZKServers()))
		if err != nil {
			return nil, err
		}
		l = z
		k.closers = append(k.closers, z.Close)
	default:
		return nil, fmt.Errorf("no naive loop for %s", backend)
	}
	if k.lockers == nil {
		k.lockers = map[string]naive.Locker{}
	}
	k.lockers[backend] = l
	return l, nil
}

func orStack(v string, def []string) []string {
	if l := cliflag.SplitList(v); len(l) > 0 {
		return l
	}
	return def
}

// naiveLoop measures backend's naive loop on keys keys.
func (k *limitsKit) naiveLoop(ctx context.Context, backend string, keys int, stderr io.Writer) (*naive.Result, error) {
	l, err := k.locker(ctx, backend)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "bench: naive %s loop, %d goroutines, %d key(s), %v\n", l.Name(), k.bc.Clients, keys, k.bc.JudgeWindow)
	r, err := k.table.Run(ctx, l, naive.Config{Goroutines: k.bc.Clients, Keys: keys, Warmup: k.bc.JudgeWarmup, Window: k.bc.JudgeWindow, Seed: k.bc.Seed})
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// floorRun starts the floor's processes, attacks them with the hot
// workload's body and stops them.
func (k *limitsKit) floorRun(ctx context.Context, stderr io.Writer) (*Judged, error) {
	ps, err := floor.Start(ctx, k.bc.Bin, []string{"load", "floor", "--addr=127.0.0.1:0"}, k.bc.Instances, k.bc.StartupTimeout)
	if err != nil {
		return nil, err
	}
	defer floor.StopAll(ps)
	var urls []string
	var pids []int
	for _, p := range ps {
		urls, pids = append(urls, p.URL), append(pids, p.PID())
	}
	fmt.Fprintf(stderr, "bench: HTTP floor, %d processes, vegeta %d workers, %v\n", len(ps), k.bc.Clients, k.bc.JudgeWindow)
	j := k.bc.judgeWorkload(ctx, k.bc.judgeConfig(urls, []string{"floor-hot"}), pids, nil)
	return j, nil
}

// beforeHot measures the limits a backend's hot runs are compared with.
func (k *limitsKit) beforeHot(ctx context.Context, l *Limits, stderr io.Writer) {
	if slices.Contains(floorBackends, l.Backend) {
		f, err := k.floorRun(ctx, stderr)
		l.note("floor", err)
		l.Floor = f
	}
	if _, ok := naiveLibrary[l.Backend]; ok {
		r, err := k.naiveLoop(ctx, l.Backend, 1, stderr)
		l.note("naive hot", err)
		l.NaiveHot = r
	}
}

// beforeSpread measures the limits a backend's spread runs are compared with.
func (k *limitsKit) beforeSpread(ctx context.Context, p *ceilingProbe, l *Limits, stderr io.Writer) {
	s := CeilingSample{Before: l.Backend, At: time.Now().UTC(), LoadAvg1: loadAvg1(), Rows: k.bc.SpreadSKUs}
	n, elapsed, err := p.measure(ctx, k.bc.CeilingDuration, k.bc.SpreadSKUs)
	l.note("spread ceiling", err)
	if err == nil {
		s.Writes, s.DurationS, s.PerS = n, roundS(elapsed), perS(n, elapsed)
		l.SpreadCeiling = &s
		fmt.Fprintf(stderr, "bench: spread ceiling (%d rows) %.0f orders/s\n", k.bc.SpreadSKUs, s.PerS)
	}
	if _, ok := naiveLibrary[l.Backend]; ok {
		r, err := k.naiveLoop(ctx, l.Backend, k.bc.SpreadSKUs, stderr)
		l.note("naive spread", err)
		l.NaiveSpread = r
	}
}

func (l *Limits) note(what string, err error) {
	if err != nil {
		l.Errors = append(l.Errors, fmt.Sprintf("%s: %v", what, err))
	}
}

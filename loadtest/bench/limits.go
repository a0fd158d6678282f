package bench

import (
	"cmp"
	"context"
	"errors"
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
// same conditions: the store's spread ceiling (in turns with the spread
// window for a backend judged against it, else before its spread runs), and
// for the backends the issue compares with them, the naive loops of the
// matching library (the hot key's before the hot runs, the spread keys'
// in turns with the spread window) and the HTTP floor (in turns with the
// hot window); for redis, postgres' service in turns with its 1,000-SKU
// window (spreadRivals).
type Limits struct {
	Backend       string         `json:"backend"`
	Round         int            `json:"round,omitempty"`
	SpreadCeiling *CeilingSample `json:"spread_ceiling,omitempty"`
	NaiveHot      *naive.Result  `json:"naive_hot,omitempty"`
	NaiveSpread   *naive.Result  `json:"naive_spread,omitempty"`
	Floor         *Judged        `json:"floor,omitempty"`
	// Rival is the 1,000-SKU window of RivalBackend's instances, in turns
	// with this backend's, coalescing on both; its store is read back as
	// the service's is.
	RivalBackend string  `json:"rival_backend,omitempty"`
	Rival        *Judged `json:"rival_spread,omitempty"`
	// Errors are the limits that could not be measured.
	Errors []string `json:"errors,omitempty"`
}

func (l Limits) round() int { return l.Round }

// naiveLibrary is the backend whose naive counterpart a library is.
var naiveLibrary = map[string]string{"redlock": "go-redsync", "zookeeper": "go-zookeeper zk.Lock"}

// floorBackends are the backends whose hot SKU is compared with the floor.
var floorBackends = []string{"redlock", "zookeeper"}

// ceilingBackends are the backends whose 1,000-SKU window is compared with
// the spread ceiling: the ceiling takes turns with it. For the others it
// is sampled before their spread runs, for the record.
var ceilingBackends = []string{"postgres"}

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

// partner is a limit, or a rival backend's service, that takes turns with
// one judged window of the service (judgeService), so that the two are
// measured under the same conditions: the HTTP floor's processes with the
// hot SKU's window, a naive loop or a rival with the 1,000 SKUs',
// coalescing on both.
type partner struct {
	name  string
	floor []*floor.Process // the floor's processes, or
	loop  *naive.Loop      // the naive loop, or
	rival *rival           // the rival's instances, or
	// ceiling is the spread ceiling's writers, sample its figures.
	ceiling *ceilingTurns
	sample  CeilingSample
	// judged is the floor's or the rival's window; ran says the window
	// was judged.
	judged *Judged
	ran    bool
}

// side is the partner's side of the window.
func (p *partner) side(bc Config) judgeSide {
	if p.loop != nil {
		return judgeSide{turner: p.loop}
	}
	if p.rival != nil {
		return p.rival.side(bc)
	}
	if p.ceiling != nil {
		return judgeSide{turner: p.ceiling}
	}
	var urls []string
	var pids []int
	for _, f := range p.floor {
		urls, pids = append(urls, f.URL), append(pids, f.PID())
	}
	return judgeSide{jc: bc.judgeConfig(urls, []string{"floor-hot"}), pids: pids}
}

// finish stops the partner and keeps what it measured in l.
func (p *partner) finish(ctx context.Context, l *Limits) {
	if p == nil {
		return
	}
	if p.floor != nil {
		floor.StopAll(p.floor)
	}
	var naiveRes naive.Result
	var naiveErr error
	if p.loop != nil {
		naiveRes, naiveErr = p.loop.Stop(ctx)
	}
	if p.rival != nil {
		damaged := p.judged != nil && p.judged.Readback.Damaged()
		l.note("rival "+p.rival.backend+": stop", p.rival.stop(damaged))
	}
	if !p.ran {
		l.note(p.name, errors.New("not judged: the window it takes turns with did not reach the judge"))
		return
	}
	switch {
	case p.loop != nil:
		l.note("naive spread", naiveErr)
		if naiveErr == nil {
			l.NaiveSpread = &naiveRes
		}
	case p.rival != nil:
		l.RivalBackend, l.Rival = p.rival.backend, p.judged
	case p.ceiling != nil:
		if !p.ceiling.fill(&p.sample) {
			l.note("spread ceiling", errors.New("no measured turn: the window it takes turns with ended first"))
			return
		}
		l.SpreadCeiling = &p.sample
	default:
		l.Floor = p.judged
	}
}

// beforeHot measures the limits a backend's hot runs are compared with
// and, for the backends compared with the floor, starts the floor's
// processes to take turns with the hot window.
func (k *limitsKit) beforeHot(ctx context.Context, l *Limits, stderr io.Writer) *partner {
	var p *partner
	if slices.Contains(floorBackends, l.Backend) {
		ps, err := floor.Start(ctx, k.bc.Bin, []string{"load", "floor", "--addr=127.0.0.1:0"}, k.bc.Instances, k.bc.StartupTimeout)
		l.note("floor", err)
		if err == nil {
			p = &partner{name: fmt.Sprintf("the HTTP floor (%d processes)", len(ps)), floor: ps}
		}
	}
	if _, ok := naiveLibrary[l.Backend]; ok {
		r, err := k.naiveLoop(ctx, l.Backend, 1, stderr)
		l.note("naive hot", err)
		l.NaiveHot = r
	}
	return p
}

// beforeSpread measures the limits a backend's spread runs are compared
// with, or readies them to take turns with the spread window: the spread
// ceiling's rows for a backend judged against it (ceilingBackends), else
// its sample, and then the rival's instances for a backend with one
// (spreadRivals), the naive loop on the spread keys for one with a naive
// library.
func (k *limitsKit) beforeSpread(ctx context.Context, p *ceilingProbe, l *Limits, stderr io.Writer) *partner {
	s := CeilingSample{Before: l.Backend, At: time.Now().UTC(), LoadAvg1: loadAvg1(), Rows: k.bc.SpreadSKUs}
	if slices.Contains(ceilingBackends, l.Backend) {
		t, err := p.turns(ctx, k.bc.SpreadSKUs)
		if err != nil {
			l.note("spread ceiling", err)
			return nil
		}
		return &partner{name: fmt.Sprintf("the spread ceiling (%d connections, %d rows)", len(p.conns), k.bc.SpreadSKUs), ceiling: t, sample: s}
	}
	n, elapsed, err := p.measure(ctx, k.bc.CeilingDuration, k.bc.SpreadSKUs)
	l.note("spread ceiling", err)
	if err == nil {
		s.Writes, s.DurationS, s.PerS = n, roundS(elapsed), perS(n, elapsed)
		l.SpreadCeiling = &s
		fmt.Fprintf(stderr, "bench: spread ceiling (%d rows) %.0f orders/s\n", k.bc.SpreadSKUs, s.PerS)
	}
	if rb, ok := spreadRivals[l.Backend]; ok {
		r, err := k.bc.startRival(ctx, rb, k.bc.SpreadSKUs, stderr)
		if err != nil {
			l.note("rival "+rb, err)
			return nil
		}
		return &partner{name: fmt.Sprintf("%s (%d instances, %d SKUs of their own)", rb, len(r.ins), len(r.skus)), rival: r}
	}
	if _, ok := naiveLibrary[l.Backend]; !ok {
		return nil
	}
	lk, err := k.locker(ctx, l.Backend)
	if err != nil {
		l.note("naive spread", err)
		return nil
	}
	loop, err := k.table.Start(ctx, lk, naive.Config{Goroutines: k.bc.Clients, Keys: k.bc.SpreadSKUs, Seed: k.bc.Seed})
	if err != nil {
		l.note("naive spread", err)
		return nil
	}
	return &partner{name: fmt.Sprintf("the naive %s loop (%d goroutines, %d keys)", lk.Name(), k.bc.Clients, k.bc.SpreadSKUs), loop: loop}
}

func (l *Limits) note(what string, err error) {
	if err != nil {
		l.Errors = append(l.Errors, fmt.Sprintf("%s: %v", what, err))
	}
}

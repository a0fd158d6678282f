package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
	"github.com/stockguard/stockguard/loadtest/bench/cpu"
	"github.com/stockguard/stockguard/loadtest/bench/floor"
	"github.com/stockguard/stockguard/loadtest/bench/judge"
	"github.com/stockguard/stockguard/loadtest/bench/naive"
	"github.com/stockguard/stockguard/loadtest/client"
)

// floorChildEnv makes this test binary serve the floor, as `stockguard
// load floor` does, when floor.Start runs it: "1" on a free port, else on
// the address it holds.
const floorChildEnv = "STOCKGUARD_BENCH_FLOOR_CHILD"

func TestMain(m *testing.M) {
	if addr := os.Getenv(floorChildEnv); addr != "" {
		if addr == "1" {
			addr = "127.0.0.1:0"
		}
		// Stop's SIGTERM ends the child by the signal's default action.
		if err := floor.Serve(context.Background(), addr, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// migratedDatabase is a fresh database with the service's schema.
func migratedDatabase(t *testing.T, ctx context.Context) string {
	t.Helper()
	dsn := stacktest.NewDatabase(t, ctx)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if _, err := postgres.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return dsn
}

// redsyncTable is a naive table of keys rows in a fresh database, and
// go-redsync over the stack's Redis masters, both closed when t ends.
func redsyncTable(t *testing.T, ctx context.Context, keys int) (*naive.Table, *naive.Redsync, string) {
	t.Helper()
	redisAddrs := stacktest.RequireRedis(t)
	dsn := migratedDatabase(t, ctx)
	tbl, err := naive.OpenTable(ctx, dsn, keys, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tbl.Close)
	rs, err := naive.NewRedsync(ctx, redisAddrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	return tbl, rs, dsn
}

// TestNaiveLoops runs both naive loops for about a second each, on the
// hot key and on many, and checks every order counted reached the table.
func TestNaiveLoops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	zkServers := stacktest.RequireZK(t)
	const keys = 100
	tbl, rs, _ := redsyncTable(t, ctx, keys)
	zk, err := naive.NewZooKeeper(ctx, zkServers)
	if err != nil {
		t.Fatal(err)
	}
	defer zk.Close()
	for _, lk := range []naive.Locker{rs, zk} {
		for _, n := range []int{1, keys} {
			r, err := tbl.Run(ctx, lk, naive.Config{Goroutines: 8, Keys: n, Warmup: 100 * time.Millisecond, Window: 700 * time.Millisecond, Seed: 1})
			if err != nil {
				t.Fatalf("%s, %d keys: %v", lk.Name(), n, err)
			}
			t.Logf("%s, %d keys: %.0f orders/s, %d lock failures, %d placed, %d stored", lk.Name(), n, r.OrdersPerS, r.LockFailures, r.Total, r.Stored)
			if r.Orders < 1 || r.OrdersPerS <= 0 || r.Library != lk.Name() || r.Keys != n {
				t.Errorf("%s, %d keys: %+v", lk.Name(), n, r)
			}
			// The window's orders are among all placed, and each placed
			// order is a reservation in the table.
			if r.Total < r.Orders || r.Stored < r.Total {
				t.Errorf("%s, %d keys: %d in the window, %d placed, %d reached the table", lk.Name(), n, r.Orders, r.Total, r.Stored)
			}
		}
	}
}

// unlockFailsLocker is a local lock per key whose first fail releases
// report an error after releasing: with expires, as go-redsync's does
// when a majority of masters did not confirm in time (the lock's TTL frees
// it); without, a release that may have left the key held.
type unlockFailsLocker struct {
	keys    sync.Map // key → *sync.Mutex
	fail    int64
	expires bool
	calls   atomic.Int64
}

func (l *unlockFailsLocker) Name() string { return "unlock-fails" }

func (l *unlockFailsLocker) Lock(ctx context.Context, key string) (func() error, error) {
	m, _ := l.keys.LoadOrStore(key, &sync.Mutex{})
	m.(*sync.Mutex).Lock()
	return func() error {
		m.(*sync.Mutex).Unlock()
		if l.calls.Add(1) <= l.fail {
			if l.expires {
				return fmt.Errorf("%w: lock was already expired", naive.ErrUnlockExpires)
			}
			return errors.New("unlock: connection closed")
		}
		return nil
	}, nil
}

// runUnlockFails runs a naive loop of 4 goroutines on 4 keys for 300 ms
// with lk, on a fresh table.
func runUnlockFails(t *testing.T, lk *unlockFailsLocker) (naive.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tbl, err := naive.OpenTable(ctx, migratedDatabase(t, ctx), 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	return tbl.Run(ctx, lk, naive.Config{Goroutines: 4, Keys: 4, Window: 300 * time.Millisecond, Seed: 1})
}

// TestNaiveUnlockFailureStillCountsTheOrder: an order whose UPDATE
// committed is placed, whatever its release says; the failed release is
// counted apart, not as a lock failure.
func TestNaiveUnlockFailureStillCountsTheOrder(t *testing.T) {
	r, err := runUnlockFails(t, &unlockFailsLocker{fail: 3, expires: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d orders (%d placed), %d lock failures, %d unlock failures, %d stored", r.Orders, r.Total, r.LockFailures, r.UnlockFailures, r.Stored)
	// Run has checked that the table gained what the loop placed (give or
	// take the orders cut short at its end).
	if r.LockFailures != 0 || r.UnlockFailures != 3 {
		t.Errorf("3 failed releases after their UPDATE: %d lock failures, %d unlock failures", r.LockFailures, r.UnlockFailures)
	}
	var b bytes.Buffer
	printLimits(&b, &Result{Limits: []Limits{{Backend: "redlock", NaiveHot: &r}}})
	if !strings.Contains(b.String(), "lock/unlock failures") || !strings.Contains(b.String(), " 0/3 ") {
		t.Errorf("the limits table does not show the unlock failures beside the lock failures:\n%s", b.String())
	}
}

// TestNaiveUnlockFailureWithoutTTLStopsTheLoop: a failed release of a lock
// that does not expire (zk.Lock's node lives as long as its session) may
// hold its key for good, so the loop stops with an error rather than go on
// into a wait without end.
func TestNaiveUnlockFailureWithoutTTLStopsTheLoop(t *testing.T) {
	_, err := runUnlockFails(t, &unlockFailsLocker{fail: 1})
	if err == nil {
		t.Error("a release that failed without a TTL behind it: Run = nil, want the loop stopped with an error")
	}
}

// TestNaiveLoopTakesTurns: a naive loop taking turns with an attack
// places orders only in its own turns (its table is still while paused),
// counts each measured turn, and accounts for every order at the end.
func TestNaiveLoopTakesTurns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tbl, rs, dsn := redsyncTable(t, ctx, 100)
	if _, err := tbl.Run(ctx, rs, naive.Config{Goroutines: 1, Keys: 1}); err == nil {
		t.Error("a loop without a window: no error")
	}
	loop, err := tbl.Start(ctx, rs, naive.Config{Goroutines: 8, Keys: 100, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Run(ctx, 0, true); err == nil {
		t.Error("a turn of no time: no error")
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	reserved := func() int64 {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT coalesce(sum(reserved), 0) FROM "+tbl.Name()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var still []string
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	defer target.Close()
	attack, err := judge.NewSide(judge.Config{URLs: []string{target.URL}, SKUs: []string{"s"}, Workers: 2, Window: time.Second, KeyPrefix: "k", RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer attack.Close()
	// In the attack's turns the loop is paused.
	err = judge.Turns(ctx, []judge.Turner{attack, loop}, judge.Schedule{Warmup: 100 * time.Millisecond, Window: 4 * 300 * time.Millisecond, Turns: 4,
		Settle: 50 * time.Millisecond, OnTurn: unmovedInTurnsOf(0, reserved, &still)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := loop.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(still) > 0 {
		t.Errorf("the loop placed orders during the attack's turns: %v", still)
	}
	if len(r.TurnsPerS) != 4 || r.Orders < 4 || r.DurationS < 1.1 || r.DurationS > 1.5 || r.Total < r.Orders || r.Stored != r.Total {
		t.Errorf("loop %+v: want 4 turns of 0.3 s, every order stored", r)
	}
}

// TestFloorJudged starts the floor as processes, checks one answer has
// the service's shape, and judges it for a second with the CPU meter.
func TestFloorJudged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Setenv(floorChildEnv, "1")
	ps, err := floor.Start(ctx, os.Args[0], nil, 2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer floor.StopAll(ps)

	resp, err := http.Post(ps[0].URL+"/v1/orders", "application/json", bytes.NewReader([]byte(`{"lines":[{"sku":"a-1","quantity":1}],"hold_seconds":60}`)))
	if err != nil {
		t.Fatal(err)
	}
	var o client.OrderResponse
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	err = dec.Decode(&o)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || o.Status != "reserved" || len(o.Lines) != 1 || o.Lines[0].SKU != "a-1" ||
		o.ExpiresAt == "" || o.OrderID == "" || resp.Header.Get("Location") != "/v1/orders/"+o.OrderID {
		t.Fatalf("floor answer: %d %+v %v", resp.StatusCode, o, err)
	}

	var urls []string
	var pids []int
	for _, p := range ps {
		urls, pids = append(urls, p.URL), append(pids, p.PID())
	}
	meter := cpu.NewMeter([]cpu.Class{{Name: "instances", Roots: pids}, {Name: "client", Roots: []int{os.Getpid()}}})
	var before, after cpu.Snapshot
	var edges int
	res, err := judge.Attack(ctx, judge.Config{URLs: urls, SKUs: []string{"a-1", "b-2"}, Workers: 8, Warmup: 200 * time.Millisecond,
		Window: time.Second, KeyPrefix: "t", RequestTimeout: 5 * time.Second, Seed: 3,
		OnWindow: func(begin bool) {
			edges++
			var err error
			if begin {
				before, err = meter.Snapshot()
			} else {
				after, err = meter.Snapshot()
			}
			if err != nil {
				t.Error(err)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	w := meter.Between(before, after, res.Created)
	t.Logf("floor: %.0f orders/s, p99 %.1f ms, %v; CPU %+v", res.OrdersPerS, res.LatencyMs.P99, res.Status, w.Classes)
	if edges != 2 || res.Created < 1 || int(res.Created) != res.Status["201"] || len(res.Status) != 1 || res.WarmupCreated < 1 ||
		res.LatencyMs.P99 <= 0 || w.Classes[0].CPUS <= 0 || w.TotalPerOrderUs <= 0 {
		t.Errorf("judged floor: %+v, CPU %+v, %d window edges", res, w, edges)
	}
}

// TestRivalJudged starts postgres' service as the rival of a window (the
// real binary on a fresh database), judges it in turns with a load of
// another kind, reads its SKUs back and stops it: what redis ≥ postgres
// is judged on.
func TestRivalJudged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := migratedDatabase(t, ctx)
	bin := filepath.Join(t.TempDir(), "stockguard")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/stockguard")
	build.Dir = "../.." // the module root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/stockguard: %v\n%s", err, out)
	}
	bc := Config{Bin: bin, Instances: 2, Clients: 8, DatabaseURL: dsn, StartupTimeout: 30 * time.Second,
		JudgeWarmup: 200 * time.Millisecond, JudgeWindow: 2 * time.Second, LogDir: filepath.Join(t.TempDir(), "logs")}
	var stderr bytes.Buffer
	r, err := bc.startRival(ctx, "postgres", 20, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	p := &partner{name: "postgres", rival: r}
	var other sleeper
	js := bc.judgeSides(ctx, []judgeSide{p.side(bc), {turner: &other}}, 2)
	p.judged, p.ran = js[0], true
	r.readBack(ctx, p.judged)
	var l Limits
	p.finish(ctx, &l)
	j := l.Rival
	if l.RivalBackend != "postgres" || j == nil || !j.verified() || j.Created < 1 || len(j.TurnsPerS) != 2 || other.measured != 2 {
		t.Fatalf("rival: %+v, judged %+v, errors %q, the other side measured %d times", l, j, l.Errors, other.measured)
	}
	if j.Readback.SKUs != 20 || j.Readback.Held != j.WarmupCreated+j.Created || j.Section == nil || j.Section.Holds < 1 || j.CPU == nil {
		t.Errorf("rival's window: readback %+v, section %+v, CPU %+v", j.Readback, j.Section, j.CPU)
	}
	for _, in := range r.ins {
		if err := syscall.Kill(in.PID(), 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("rival instance %d still runs after finish (%v)", in.PID(), err)
		}
	}
	t.Logf("rival: %.0f orders/s in turns, %s", j.OrdersPerS, j.Readback.Verdict)
}

// sleeper is a side of Turns that puts no load on: it counts its measured
// runs.
type sleeper struct{ measured int }

func (s *sleeper) Run(ctx context.Context, d time.Duration, measured bool) error {
	if measured {
		s.measured++
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *sleeper) Pause(context.Context) error { return nil }

// TestCeilingTakesTurns: the spread ceiling as a side of Turns writes
// only in its own turns (not one row moves in the other side's) and
// counts only its measured ones.
func TestCeilingTakesTurns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dsn := migratedDatabase(t, ctx)
	p, err := openCeiling(ctx, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	ct, err := p.turns(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	reserved := func() int64 {
		var n int64
		if err := p.conns[0].QueryRow(ctx, "SELECT coalesce(sum(reserved), 0) FROM "+p.table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var still []string
	other := &sleeper{}
	err = judge.Turns(ctx, []judge.Turner{other, ct}, judge.Schedule{Warmup: 100 * time.Millisecond, Window: 4 * 300 * time.Millisecond, Turns: 4,
		Settle: 50 * time.Millisecond, OnTurn: unmovedInTurnsOf(0, reserved, &still)})
	if err != nil {
		t.Fatal(err)
	}
	if len(still) > 0 {
		t.Errorf("the ceiling wrote during the other side's turns: %v", still)
	}
	var none CeilingSample
	if (&ceilingTurns{}).fill(&none) || none.PerS != 0 {
		t.Errorf("a ceiling with no measured turn filled %+v", none)
	}
	s := CeilingSample{Rows: 100}
	if !ct.fill(&s) {
		t.Fatal("four measured turns, nothing filled")
	}
	if total := reserved(); len(s.TurnsPerS) != 4 || s.Writes < 4 || s.DurationS < 1.1 || s.DurationS > 1.5 || total <= s.Writes || s.PerS <= 0 {
		t.Errorf("ceiling %+v, %d rows reserved: want 4 turns of 0.3 s, the warm-up and settles written but not counted", s, total)
	}
}

// unmovedInTurnsOf is an OnTurn that reads a count around each turn of
// side and adds to still every turn in which it moved.
func unmovedInTurnsOf(side int, count func() int64, still *[]string) func(int, bool) {
	var before int64
	return func(i int, begin bool) {
		if i != side {
			return
		}
		if begin {
			before = count()
		} else if after := count(); after != before {
			*still = append(*still, fmt.Sprintf("%d → %d", before, after))
		}
	}
}

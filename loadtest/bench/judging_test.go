package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/bench/floor"
	"github.com/stockguard/stockguard/loadtest/bench/judge"
	"github.com/stockguard/stockguard/loadtest/bench/section"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/compare"
	"github.com/stockguard/stockguard/loadtest/fakeservice"
	"github.com/stockguard/stockguard/loadtest/run"
)

// skuServer answers GET /v1/skus/{sku} from states, and 404 for the rest.
func skuServer(t *testing.T, states map[string]client.SKUState) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, ok := states[strings.TrimPrefix(r.URL.Path, "/v1/skus/")]
		w.Header().Set("Content-Type", "application/json")
		if !ok || r.Method != http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"unknown_sku","message":"unknown_sku"}}`))
			return
		}
		_ = json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// held is a judged SKU holding reserved of stock units.
func held(sku string, stock, reserved int64) client.SKUState {
	return client.SKUState{SKU: sku, Received: stock, Available: stock - reserved, Reserved: reserved}
}

// TestReadBack: the units each judged SKU holds must lie between its 201s
// (warm-up and window) and those plus its unsettled answers.
func TestReadBack(t *testing.T) {
	// 6 + 90 created, 1 + 3 unsettled: 96..100 units; a 50 created and
	// 0..2 unsettled, b 46 and 0..2.
	res := judge.Result{WarmupCreated: 6, Created: 90, WarmupUnsettled: 1, Unsettled: 3,
		BySKU: []judge.SKUAnswers{{Created: 50, Unsettled: 2}, {Created: 46, Unsettled: 2}}}
	for _, tc := range []struct {
		name    string
		states  map[string]client.SKUState
		safe    bool
		problem string
	}{
		{"every 201 held", map[string]client.SKUState{"a": held("a", 1000, 50), "b": held("b", 1000, 46)}, true, ""},
		{"unsettled ones placed", map[string]client.SKUState{"a": held("a", 1000, 52), "b": held("b", 1000, 48)}, true, ""},
		{"a 201 lost", map[string]client.SKUState{"a": held("a", 1000, 50), "b": held("b", 1000, 45)}, false, "b holds 45 units, its answers allow 46..48"},
		{"units without answers", map[string]client.SKUState{"a": held("a", 1000, 53), "b": held("b", 1000, 46)}, false, "a holds 53 units, its answers allow 50..52"},
		{"a 201 lost behind another SKU's unsettled one", map[string]client.SKUState{"a": held("a", 1000, 52), "b": held("b", 1000, 45)}, false,
			"b holds 45 units"},
		{"counters broken", map[string]client.SKUState{"a": held("a", 1000, 50), "b": {SKU: "b", Received: 1000, Available: 960, Reserved: 46}}, false,
			"b: received 1000 != available 960 + reserved 46 + sold 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client.New(2, "", 5*time.Second)
			defer c.Close()
			rb := readBack(context.Background(), c, skuServer(t, tc.states), []string{"a", "b"}, 1000, res)
			if rb.Safe != tc.safe || rb.Damaged() == tc.safe || rb.Min != 96 || rb.Max != 100 || !strings.Contains(rb.Verdict, tc.problem) {
				t.Errorf("%+v", rb)
			}
		})
	}
	c := client.New(2, "", 5*time.Second)
	defer c.Close()
	rb := readBack(context.Background(), c, skuServer(t, nil), []string{"a", "b"}, 1000, res)
	if rb.Safe || rb.Damaged() || rb.Error == "" || !strings.HasPrefix(rb.Verdict, "NOT VERIFIED") {
		t.Errorf("unreadable SKUs: %+v", rb)
	}
	// Answers by SKU that do not add up to the answers in all would loosen
	// some SKU's bounds: not verified, not read.
	short := res
	short.BySKU = res.BySKU[:1]
	rb = readBack(context.Background(), c, skuServer(t, map[string]client.SKUState{"a": held("a", 1000, 50), "b": held("b", 1000, 46)}), []string{"a", "b"}, 1000, short)
	if rb.Safe || rb.Damaged() || !strings.HasPrefix(rb.Verdict, "NOT VERIFIED: judge readback: answers by SKU") {
		t.Errorf("answers by SKU short of the total: %+v", rb)
	}
}

// lossyStore is a stand-in service on two SKUs whose first lose 201s on
// skuA reserve nothing (lost updates), and whose first lose orders on skuB
// reserve their unit but answer 500 (unsettled); every other order
// reserves its unit and answers 201. GET /v1/skus/{sku} reads the store.
type lossyStore struct {
	mu                sync.Mutex
	reserved, created map[string]int64
	lostA, unsettledB int
	lose              int
	skuA, skuB        string
	requestURIs       map[string]bool
}

func (s *lossyStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method == http.MethodGet {
		sku := strings.TrimPrefix(r.URL.Path, "/v1/skus/")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(held(sku, judgeStock, s.reserved[sku]))
		return
	}
	s.requestURIs[r.RequestURI] = true
	var o struct {
		Lines []struct {
			SKU string `json:"sku"`
		} `json:"lines"`
	}
	if err := json.NewDecoder(r.Body).Decode(&o); err != nil || len(o.Lines) != 1 {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	sku := o.Lines[0].SKU
	switch {
	case sku == s.skuA && s.lostA < s.lose:
		s.lostA++
		s.created[sku]++
		w.WriteHeader(http.StatusCreated)
	case sku == s.skuB && s.unsettledB < s.lose:
		s.unsettledB++
		s.reserved[sku]++
		w.WriteHeader(http.StatusInternalServerError)
	default:
		s.reserved[sku]++
		s.created[sku]++
		w.WriteHeader(http.StatusCreated)
	}
}

// TestReadBackHoldsEachSKUToItsOwnAnswers: five 201s on one SKU that hold
// no unit are a lost update even when five unsettled answers on another
// SKU did reserve theirs, which makes the total come out right; the judge
// chose every order's SKU, so each SKU is checked against its own answers.
func TestReadBackHoldsEachSKUToItsOwnAnswers(t *testing.T) {
	st := &lossyStore{reserved: map[string]int64{}, created: map[string]int64{}, lose: 5, skuA: "lossy-a", skuB: "lossy-b", requestURIs: map[string]bool{}}
	srv := httptest.NewServer(st)
	defer srv.Close()
	skus := []string{st.skuA, st.skuB}
	bc := Config{Clients: 2, JudgeWarmup: 100 * time.Millisecond, JudgeWindow: 300 * time.Millisecond}
	res, err := judge.Attack(context.Background(), bc.judgeConfig([]string{srv.URL}, skus))
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(4, "", 5*time.Second)
	defer c.Close()
	rb := readBack(context.Background(), c, srv.URL, skus, judgeStock, res)
	st.mu.Lock()
	defer st.mu.Unlock()
	if lost := st.created[st.skuA] - st.reserved[st.skuA]; lost != 5 || st.unsettledB != 5 {
		t.Fatalf("setup: %d lost on %s, %d unsettled on %s; want 5 and 5", lost, st.skuA, st.unsettledB, st.skuB)
	}
	if rb.Held != rb.Min || rb.Max != rb.Min+5 {
		t.Fatalf("the total must come out right: %+v", rb)
	}
	for i, sku := range skus {
		if a := res.BySKU[i]; a.Created != st.created[sku] {
			t.Errorf("%s: %d 201s by the judge's count, %d by the store's", sku, a.Created, st.created[sku])
		}
	}
	if rb.Safe || !strings.Contains(rb.Verdict, st.skuA+" holds") {
		t.Errorf("5 201s on %s hold no unit, yet the judged window reads back %q", st.skuA, rb.Verdict)
	}
	// The SKU's index rides in the URL's fragment, which is never sent.
	if len(st.requestURIs) != 1 || !st.requestURIs["/v1/orders"] {
		t.Errorf("the orders were sent to %v, want /v1/orders alone", st.requestURIs)
	}
}

// TestReadBackAfterAttack attacks a stand-in service, safe and then one
// that loses updates (as the none backend does), and reads it back.
func TestReadBackAfterAttack(t *testing.T) {
	for _, lossy := range []bool{false, true} {
		s := fakeservice.New("tok", lossy).Server(t)
		c := client.New(4, "tok", 5*time.Second)
		defer c.Close()
		skus := []string{"j-0", "j-1"}
		for _, sku := range skus {
			if _, err := c.PutSKU(context.Background(), s.URL, sku, judgeStock); err != nil {
				t.Fatal(err)
			}
		}
		bc := Config{Clients: 8, JudgeWarmup: 100 * time.Millisecond, JudgeWindow: 300 * time.Millisecond}
		res, err := judge.Attack(context.Background(), bc.judgeConfig([]string{s.URL}, skus))
		if err != nil {
			t.Fatal(err)
		}
		rb := readBack(context.Background(), c, s.URL, skus, judgeStock, res)
		if rb.Safe == lossy || rb.Min != res.Created+res.WarmupCreated || rb.Min < 1 {
			t.Errorf("lossy %v: %+v", lossy, rb)
		}
	}
}

// TestJudgedReadbackFailsTheSuite: a safe backend's judged window whose
// store disagrees fails the suite as damage (exit 3), and its figures stay
// out of the ratios; one not read back fails it as a plain failure; a
// backend unsafe by design keeps its figures and passes.
func TestJudgedReadbackFailsTheSuite(t *testing.T) {
	lost := judgedRun("redis", benchSpread, "on", 2000, 50)
	lost.Judge.Readback = &Readback{Problems: 1, Verdict: "UNSAFE: 1 problems (the judged SKUs hold 19990 units, the answers allow 20000..20000)"}
	unread := judgedRun("postgres", benchSpread, "on", 2000, 50)
	unread.Judge.Readback = &Readback{Error: "boom", Verdict: "NOT VERIFIED: boom"}
	expected := judgedRun("none", benchSpread, "on", 3000, 50)
	expected.Judge.Readback = lost.Judge.Readback
	runs := []Run{lost, unread, expected}
	want := []string{
		"redis spread coalesce=on: judged window: " + lost.Judge.Readback.Verdict,
		"postgres spread coalesce=on: judged window: NOT VERIFIED: boom",
	}
	if got := runFailures(runs); !reflect.DeepEqual(got, want) {
		t.Errorf("failures %q, want %q", got, want)
	}
	if !(&Result{Runs: runs}).Damaged() || (&Result{Runs: runs[1:]}).Damaged() {
		t.Error("Damaged: want true with the redis window, false without")
	}
	ratios := benchRatios([]string{"redis", "postgres", "none"}, runs, nil)
	addLimitRatios(ratios, runs, nil)
	if ratios[0].Judged.SpreadPerS != 0 || ratios[1].Judged.SpreadPerS != 0 || ratios[2].Judged.SpreadPerS != 3000 {
		t.Errorf("judged spread rates %v, %v, %v: want 0, 0, 3000", ratios[0].Judged.SpreadPerS, ratios[1].Judged.SpreadPerS, ratios[2].Judged.SpreadPerS)
	}
}

// TestSpreadP99OfCreatedOnly: the p99 target is judged on the 201s; fast
// 503s that lower vegeta's own p99 do not meet it.
func TestSpreadP99OfCreatedOnly(t *testing.T) {
	r, hot := judgedRun("postgres", benchSpread, "on", 2000, 150), judgedRun("postgres", benchHot, "on", 2000, 150)
	r.Judge.LatencyMs.P99, hot.Judge.LatencyMs.P99 = 40, 40 // every answer, 503s included
	runs := []Run{r, hot}
	ratios := benchRatios([]string{"postgres"}, runs, nil)
	addLimitRatios(ratios, runs, nil)
	if j := ratios[0].Judged; j.HotP99Ms != 150 || j.SpreadP99Ms != 150 {
		t.Errorf("p99 hot %v, spread %v: want the 201s' 150 ms", j.HotP99Ms, j.SpreadP99Ms)
	}
	for _, tr := range evaluateTargets(ratios) {
		if tr.ID == "spread-p99" && (tr.Status != TargetMissed || *tr.Value != 150) {
			t.Errorf("spread-p99: %s at %v ms, want MISSED at 150", tr.Status, *tr.Value)
		}
	}
}

// TestCPUErrorKeepsTheJudgesFigures: a CPU snapshot that fails loses the
// CPU figures only, not the attack's.
func TestCPUErrorKeepsTheJudgesFigures(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	defer target.Close()
	bc := Config{Clients: 2, JudgeWindow: 200 * time.Millisecond}
	gone := 1 << 30 // above any pid_max: no such process
	j := bc.judgeWorkload(context.Background(), bc.judgeConfig([]string{target.URL}, []string{"s"}), []int{gone}, nil)
	if j.Error != "" || j.CPUError == "" || j.CPU != nil || j.Created < 1 {
		t.Fatalf("judged: error %q, CPU error %q, CPU %v, created %d", j.Error, j.CPUError, j.CPU, j.Created)
	}
	r := judgedRun("redis", benchHot, "on", 1, 1)
	r.Judge.Result, r.Judge.CPU, r.Judge.CPUError = j.Result, nil, j.CPUError
	ratios := benchRatios([]string{"redis"}, []Run{r}, nil)
	addLimitRatios(ratios, []Run{r}, nil)
	if ratios[0].Judged.HotPerS != j.OrdersPerS || ratios[0].Judged.HotCPUUs != nil {
		t.Errorf("hot %v/s (want %v), CPU %v", ratios[0].Judged.HotPerS, j.OrdersPerS, ratios[0].Judged.HotCPUUs)
	}
}

// failingTurner is a limit that fails its first run, as a naive loop
// whose order failed returns from Loop.Run.
type failingTurner struct{}

func (failingTurner) Run(context.Context, time.Duration, bool) error {
	return errors.New("naive go-redsync: an order failed; Stop says which")
}

func (failingTurner) Pause(context.Context) error { return nil }

// TestFailedWindowIsReadBack: a judged window that fails after the
// service answered orders (here its partner fails at its warm-up, after
// the service's) is read back all the same: a store that kept none of its
// 201s' units fails the suite as damage; one that kept them passes, the
// window's figures unused.
func TestFailedWindowIsReadBack(t *testing.T) {
	var created atomic.Int64
	forgetful := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(held(strings.TrimPrefix(r.URL.Path, "/v1/skus/"), judgeStock, 0))
			return
		}
		created.Add(1) // a 201 whose unit the store never got
		w.WriteHeader(http.StatusCreated)
	}))
	defer forgetful.Close()
	safe := fakeservice.New("tok", false).Server(t)
	c := client.New(4, "tok", 5*time.Second)
	defer c.Close()
	if _, err := c.PutSKU(context.Background(), safe.URL, "s", judgeStock); err != nil {
		t.Fatal(err)
	}
	bc := Config{Clients: 2, JudgeWarmup: 200 * time.Millisecond, JudgeWindow: 16 * judgeSettle}
	for _, tc := range []struct {
		url  string
		pass bool
	}{{forgetful.URL, false}, {safe.URL, true}} {
		js := bc.judgeAndReadBack(context.Background(), c, []judgeSide{
			{jc: bc.judgeConfig([]string{tc.url}, []string{"s"}), pids: []int{os.Getpid()}},
			{turner: failingTurner{}},
		}, bc.turns())
		j := js[0]
		if j.Error == "" || j.WarmupCreated < 1 || j.OrdersPerS != 0 {
			t.Fatalf("judged: error %q, %d warm-up 201s, %v orders/s: want an error after 201s, and no figures", j.Error, j.WarmupCreated, j.OrdersPerS)
		}
		run := benchRunOf("redlock", benchSpread, "on", 3000, 20, 40)
		run.Judge = j
		res := &Result{Runs: []Run{run}, Settings: Settings{Instances: 3, Clients: 64, SpreadSKUs: 1000, Rounds: 1}}
		res.Failures = runFailures(res.Runs)
		res.Pass = len(res.Failures) == 0
		if j.Readback == nil || res.Pass != tc.pass || res.Damaged() == tc.pass {
			t.Errorf("%d warm-up 201s before the judge error %q: read back %+v, failures %q, damaged %v", j.WarmupCreated, j.Error, j.Readback, res.Failures, res.Damaged())
		}
	}
	if created.Load() == 0 {
		t.Fatal("the forgetful service got no order")
	}
}

// holdingService is a stand-in instance: every order takes one
// process-wide lock for about 2 ms (a hold on one hot key), and /metrics
// serves the holds as stockguard_lock_hold_seconds after a slow scrape,
// as a loaded instance answers. Holds follow each other at once, so the
// true hand-off between holders is some microseconds.
type holdingService struct {
	mu          sync.Mutex
	holds       int64
	sumNs       int64
	scrapeDelay time.Duration
}

func (h *holdingService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metrics" {
		h.mu.Lock()
		start := time.Now()
		time.Sleep(2 * time.Millisecond)
		h.sumNs += int64(time.Since(start))
		h.holds++
		h.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		return
	}
	time.Sleep(h.scrapeDelay)
	h.mu.Lock()
	n, s := h.holds, float64(h.sumNs)/1e9
	h.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE stockguard_lock_hold_seconds histogram\n"+
		"stockguard_lock_hold_seconds_bucket{le=\"+Inf\"} %d\nstockguard_lock_hold_seconds_sum %g\nstockguard_lock_hold_seconds_count %d\n", n, s, n)
}

// TestSectionWindowIsTheAttacksSpan: the critical sections' window, from
// which the held share and the hot SKU's hand-off are computed, is the
// attack's own span, not the scrapes' edges: a slow scrape, in which no
// order is sent, does not read as hand-off.
func TestSectionWindowIsTheAttacksSpan(t *testing.T) {
	s := httptest.NewServer(&holdingService{scrapeDelay: 500 * time.Millisecond})
	defer s.Close()
	bc := Config{Clients: 2, JudgeWarmup: 100 * time.Millisecond, JudgeWindow: time.Second}
	meter := section.NewMeter([]string{s.URL}, &http.Client{Timeout: 5 * time.Second})
	j := bc.judgeWorkload(context.Background(), bc.judgeConfig([]string{s.URL}, []string{"hot"}), []int{os.Getpid()}, meter)
	if j.Error != "" || j.SectionError != "" || j.Section == nil {
		t.Fatalf("judged: error %q, section error %q", j.Error, j.SectionError)
	}
	sec := j.Section
	t.Logf("judge window %.3f s, %d created; section window %.3f s, %d holds, hold %.2f ms, held %.1f%%, hand-off %.3f ms",
		j.DurationS, j.Created, sec.DurationS, sec.Holds, sec.HoldMs, 100*sec.HeldShare, sec.HandOffMs)
	if sec.DurationS != j.DurationS || sec.Holds != uint64(j.Created) {
		t.Errorf("section window %.3f s of %d holds, judge window %.3f s of %d orders: want the same window", sec.DurationS, sec.Holds, j.DurationS, j.Created)
	}
	// Holds follow each other with no gap but the mutex's hand-over and
	// the attack's ramp and tail; the scrapes would add 500 ms / holds.
	if sec.HandOffMs > 0.5 {
		t.Errorf("hand-off %.3f ms a hold, where holds follow each other at once: the scrapes' time counted as hand-off", sec.HandOffMs)
	}
}

// TestJudgeSidesTakeTurns: the floor and the service judged in turns each
// get their own window, its CPU read over their own turns only.
func TestJudgeSidesTakeTurns(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }
	svc, fl := httptest.NewServer(http.HandlerFunc(ok)), httptest.NewServer(http.HandlerFunc(ok))
	defer svc.Close()
	defer fl.Close()
	bc := Config{Clients: 2, JudgeWarmup: 100 * time.Millisecond, JudgeWindow: 16 * judgeSettle}
	if bc.turns() != 2 {
		t.Fatalf("%d turns in a window of 16 settles, want 2", bc.turns())
	}
	start := time.Now()
	js := bc.judgeSides(context.Background(), []judgeSide{
		{jc: bc.judgeConfig([]string{svc.URL}, []string{"s"}), pids: []int{os.Getpid()}},
		{jc: bc.judgeConfig([]string{fl.URL}, []string{"floor-hot"}), pids: []int{os.Getpid()}},
	}, bc.turns())
	elapsed := time.Since(start).Seconds()
	for i, j := range js {
		if j.Error != "" || j.CPU == nil || j.Created < 1 {
			t.Fatalf("side %d: error %q, CPU error %q, created %d", i, j.Error, j.CPUError, j.Created)
		}
		// Each side's CPU window is its two turns, 4 s in all, not the
		// whole attack with the other side's turns and the settles.
		if j.CPU.DurationS < 3.9 || j.CPU.DurationS > elapsed/2 || j.CPU.Orders != j.Created {
			t.Errorf("side %d: CPU window %.3f s of %d orders; %.3f s elapsed, %d created", i, j.CPU.DurationS, j.CPU.Orders, elapsed, j.Created)
		}
	}
	for _, c := range []struct {
		window time.Duration
		turns  int
		settle time.Duration
	}{{10 * time.Second, 5, judgeSettle}, {2 * time.Second, 1, judgeSettle}, {500 * time.Millisecond, 1, 125 * time.Millisecond}} {
		if bc := (Config{JudgeWindow: c.window}); bc.turns() != c.turns || bc.settle() != c.settle {
			t.Errorf("a %v window: %d turns after settles of %v, want %d after %v", c.window, bc.turns(), bc.settle(), c.turns, c.settle)
		}
	}
}

// TestJudgeFindsRestartedServer: a server restarted between two windows
// (here the Redis address, served by a child process) is found again
// before the second, under its new PID.
func TestJudgeFindsRestartedServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv(floorChildEnv, addr)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	defer target.Close()
	bc := Config{Clients: 2, JudgeWindow: 200 * time.Millisecond, RedisAddrs: addr}
	for round := range 2 {
		ps, err := floor.Start(ctx, os.Args[0], nil, 1, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		j := bc.judgeWorkload(ctx, bc.judgeConfig([]string{target.URL}, []string{"s"}), []int{os.Getpid()}, nil)
		floor.StopAll(ps)
		if j.Error != "" || j.CPUError != "" || slices.Contains(j.ServersMissing, "redis "+addr) {
			t.Fatalf("window %d (server pid %d): error %q, CPU error %q, missing %v", round, ps[0].PID(), j.Error, j.CPUError, j.ServersMissing)
		}
	}
}

// TestInterruptedRunIsNotRan: a run interrupted before its verification
// keeps its partial figures but stays out of the ratios.
func TestInterruptedRunIsNotRan(t *testing.T) {
	partial := &run.Result{ThroughputPerS: 900, ReservedPerS: 900, Verdict: "INTERRUPTED after 10 of 100 orders, while sending: not verified"}
	cr := &compare.Result{Backends: []compare.Entry{{Backend: "redis", Result: partial, Error: "run interrupted: context canceled"}}}
	br := Run{Backend: "redis", Workload: benchHot, Coalesce: "on"}.condense(cr, context.Canceled)
	if br.Ran || br.ReservedPerS != 900 || br.Error == "" {
		t.Fatalf("condensed %+v", br)
	}
	if r := benchRatios([]string{"redis"}, []Run{br}, nil)[0]; r.HotCoalescedPerS != 0 || !slices.Contains(r.Missing, "hot/on") {
		t.Errorf("ratios %+v", r)
	}
	done := Run{Backend: "redis"}.condense(&compare.Result{Backends: []compare.Entry{{Backend: "redis", Result: &run.Result{Safe: true}}}}, nil)
	if !done.Ran {
		t.Errorf("a completed run: %+v", done)
	}
}

// TestBenchHoldsOutlastTheSuite: no order of the suite, the run's or the
// judge's, expires before the default suite of the most rounds ends,
// however slow its instances are to start and stop.
func TestBenchHoldsOutlastTheSuite(t *testing.T) {
	bc := Config{Backends: compare.AllBackends(), Instances: 3, Clients: 64, SpreadSKUs: 1000, Duration: 8 * time.Second,
		MaxRate: 15000, CeilingDuration: 3 * time.Second, StartupTimeout: 30 * time.Second,
		JudgeWarmup: 2 * time.Second, JudgeWindow: 10 * time.Second}
	// A run: start, send, verify (the request timeout), judge, stop.
	perRun := bc.StartupTimeout + bc.Duration + 30*time.Second + bc.JudgeWarmup + bc.JudgeWindow + 10*time.Second
	suite := maxRounds * time.Duration(len(bc.Backends)) * (4*perRun + 3*bc.CeilingDuration + 4*(bc.JudgeWarmup+bc.JudgeWindow))
	for _, hold := range []int{bc.compareConfig("redis", benchHot, "on").Run.HoldSeconds, bc.judgeConfig([]string{"u"}, []string{"s"}).HoldSeconds} {
		if time.Duration(hold)*time.Second < suite || hold > 86400 {
			t.Errorf("hold %d s: want at least the suite's %v, at most the service's 86400 s", hold, suite)
		}
	}
}

// judgeWorkload is judgeSides with one side: it attacks processes already
// serving, reading the CPU of
// every class around the window, and, with sections (the service, not the
// floor), the instances' critical sections.
func (bc Config) judgeWorkload(ctx context.Context, jc judge.Config, pids []int, sections *section.Meter) *Judged {
	return bc.judgeSides(ctx, []judgeSide{{jc: jc, pids: pids, sections: sections}}, 1)[0]
}

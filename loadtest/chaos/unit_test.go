package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/run"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// echoServer answers every line with its prefix and the line, so a test can
// tell which upstream a forwarded connection reached.
func echoServer(t *testing.T, prefix string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, prefix+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line and waits up to d for the answer.
func roundTrip(c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	s, err := r.ReadString('\n')
	return strings.TrimSpace(s), err
}

func TestChaosForwarderHoldSwitchDrop(t *testing.T) {
	a, b := echoServer(t, "a:"), echoServer(t, "b:")
	f, err := newForwarder(a)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	c, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "1", 2*time.Second); err != nil || got != "a:1" {
		t.Fatalf("through the forwarder: %q, %v", got, err)
	}

	// Held: nothing passes, however long we wait.
	f.Hold()
	if got, err := roundTrip(c, r, "2", 300*time.Millisecond); err == nil {
		t.Fatalf("held forwarder passed %q", got)
	}
	f.Release()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, _ := r.ReadString('\n'); strings.TrimSpace(got) != "a:2" {
		t.Fatalf("after release: %q, want the held line", got)
	}

	// Held bytes die with the connection: a dropped client never sees them.
	f.Hold()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c, "3\n")
	time.Sleep(100 * time.Millisecond)
	f.Switch(b) // drops every connection
	f.Release()
	if got, err := r.ReadString('\n'); err == nil {
		t.Fatalf("dropped connection still delivered %q", got)
	}

	// New connections reach the new upstream.
	c2, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(c2, bufio.NewReader(c2), "4", 2*time.Second); err != nil || got != "b:4" {
		t.Fatalf("after Switch: %q, %v", got, err)
	}
	if err := f.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", f.Addr(), time.Second); err == nil {
		t.Fatal("closed forwarder still accepts")
	}
}

// TestChaosForwarderCloseDuringDial: a Close while a connection's upstream
// dial is under way returns, and the connection is closed rather than
// forwarded by a pair nobody drops any more.
func TestChaosForwarderCloseDuringDial(t *testing.T) {
	up := echoServer(t, "a:")
	f, err := newForwarder(up)
	if err != nil {
		t.Fatal(err)
	}
	dialing, proceed := make(chan struct{}), make(chan struct{})
	f.mu.Lock()
	f.dial = func(address string) (net.Conn, error) {
		close(dialing)
		<-proceed
		return dialUpstream(address)
	}
	f.mu.Unlock()
	c, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-dialing:
	case <-time.After(2 * time.Second):
		t.Fatal("the forwarder never dialed upstream")
	}
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	// Close has marked the forwarder closed (and dropped the pairs it knew)
	// before the dial returns.
	for {
		f.mu.Lock()
		done := f.closed
		f.mu.Unlock()
		if done {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(proceed)
	select {
	case err := <-closed:
		if err != nil && !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close still waiting 3 s after the dial returned: the late pair was forwarded")
	}
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := roundTrip(c, bufio.NewReader(c), "1", 2*time.Second); err == nil {
		t.Fatalf("connection accepted before Close was forwarded: %q", got)
	}
}

func TestChaosSumCounters(t *testing.T) {
	raw := []byte(`# HELP stockguard_stale_fence_total Writes the store rejected.
# TYPE stockguard_stale_fence_total counter
stockguard_stale_fence_total 3
stockguard_leases_lost_total{backend="redis"} 2
stockguard_leases_lost_total{backend="redlock"} 1.5
stockguard_stale_fence_total_other 100
stockguard_zk_sessions_lost_total{reason="expired",x="a b"} 1
`)
	got := sumCounters(raw, []string{metricStaleFence, metricLeasesLost, metricZKSessLost, "absent_total"})
	want := map[string]float64{metricStaleFence: 3, metricLeasesLost: 3.5, metricZKSessLost: 1, "absent_total": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

func TestChaosBucketsAndGaps(t *testing.T) {
	outs := []chaosOutcome{
		{done: 50 * time.Millisecond, kind: client.KindReserved},
		{done: 150 * time.Millisecond, kind: client.KindStaleFence},
		{done: 160 * time.Millisecond, kind: client.KindLockUnavailable},
		{done: 900 * time.Millisecond, kind: client.KindReserved},
		{done: 950 * time.Millisecond, kind: client.KindUnknown},
	}
	size, bs := buckets(outs, time.Second)
	if size != 100 || len(bs) != 11 {
		t.Fatalf("bucket size %d, %d buckets", size, len(bs))
	}
	if bs[0].Reserved != 1 || bs[1].StaleFence != 1 || bs[1].LockUnavailable != 1 || bs[9].Reserved != 1 || bs[9].Other != 1 {
		t.Fatalf("buckets %+v", bs)
	}
	if size, _ := buckets(nil, 5*time.Minute); size != 5000 {
		t.Fatalf("5 min: bucket size %d, want 5000", size)
	}
	if g := longestGap([]time.Duration{50 * time.Millisecond, 900 * time.Millisecond}, time.Second); g != 850 {
		t.Fatalf("longest gap %v ms, want 850", g)
	}
	if g := longestGap(nil, time.Second); g != 1000 {
		t.Fatalf("no success: longest gap %v ms, want 1000", g)
	}
}

func TestChaosJudge(t *testing.T) {
	recovered := 120.0
	ph, majority := scenarioByName("pause-holder"), scenarioByName("kill-redis-majority")
	expiry, lostAck := scenarioByName("zk-session-expiry"), scenarioByName("lost-commit-ack")
	// A session expiry the instance noticed and recovered from.
	expired := func(stale int64) Run {
		return Run{Expect: ExpectSafe, StaleWritesRejected: stale, RecoveryMs: &recovered, Metrics: map[string]float64{metricZKSessLost: 1}}
	}
	acks := func(la LostAcks) Run {
		return Run{Expect: ExpectSafe, History: &HistoryCheck{Operations: 9, LostAcks: &la}}
	}
	cases := []struct {
		name string
		sc   *scenario
		run  Run
		pass bool
	}{
		{"fenced, safe, stale rejected", ph, Run{Expect: ExpectSafe, StaleWritesRejected: 2}, true},
		{"fenced, safe, race not exercised", ph, Run{Expect: ExpectSafe}, false},
		{"fenced, oversold", ph, Run{Expect: ExpectSafe, StaleWritesRejected: 1, Units: tally.UnitCounts{Oversold: 3}}, false},
		{"fenced, unknown outcomes", ph, Run{Expect: ExpectSafe, StaleWritesRejected: 1, Orders: tally.OrderCounts{Unresolved: 1}}, false},
		{"unfenced race, damage", ph, Run{Expect: ExpectDamage, Units: tally.UnitCounts{Lost: 1}}, true},
		{"unfenced race, no damage", ph, Run{Expect: ExpectDamage}, false},
		{"majority, 503s and recovery", majority, Run{Expect: ExpectSafe, Fault: FaultFigures{LockUnavailableDuring: 9}, RecoveryMs: &recovered}, true},
		{"majority, never recovered", majority, Run{Expect: ExpectSafe, Fault: FaultFigures{LockUnavailableDuring: 9}}, false},
		{"unfenced report, no damage", majority, Run{Expect: ExpectReport, Fault: FaultFigures{LockUnavailableDuring: 9}}, true},
		{"unfenced report, quorum never lost", majority, Run{Expect: ExpectReport}, false},
		{"error", majority, Run{Expect: ExpectReport, Error: "start instances: boom"}, false},
		{"session expired, stale write refused", expiry, expired(1), true},
		{"session expired, no stale write refused", expiry, expired(0), false},
		{"session expired unfenced, damage", expiry, Run{Expect: scenarioPlan(expiry, "off").expect(), Units: tally.UnitCounts{Oversold: 25}, Metrics: map[string]float64{metricZKSessLost: 1}}, true},
		{"session expired unfenced, no damage", expiry, Run{Expect: scenarioPlan(expiry, "off").expect()}, false},
		{"every round lost a committed ack", lostAck, acks(LostAcks{Rounds: 3, Dropped: 3, Committed: 3, Replayed: 3, OrdersPerKey: 1}), true},
		{"a round dropped nothing", lostAck, acks(LostAcks{Rounds: 3, Dropped: 2, Committed: 2, Replayed: 3, OrdersPerKey: 1}), false},
		{"a drop before the commit", lostAck, acks(LostAcks{Rounds: 3, Dropped: 3, Committed: 2, Replayed: 3, OrdersPerKey: 1}), false},
	}
	for _, tc := range cases {
		r := tc.run
		r.judge(tc.sc)
		if r.Pass != tc.pass {
			t.Errorf("%s: pass = %v (%v), want %v", tc.name, r.Pass, r.Failures, tc.pass)
		}
	}
}

// scenarioPlan is sc's plan on its first backend with fencing.
func scenarioPlan(sc *scenario, fencing string) chaosPlan {
	return chaosPlan{sc: sc, backend: sc.Backends[0], fencing: fencing}
}

// TestChaosLeaseExpiry: how long each backend's lease outlives a silent
// holder, which pause-holder freezes it past and partition-holder stalls it
// past; etcd grants whole seconds only.
func TestChaosLeaseExpiry(t *testing.T) {
	for _, tc := range []struct {
		backend string
		ttl     time.Duration
		want    time.Duration
		what    string
	}{
		{"redis", 1500 * time.Millisecond, 1500 * time.Millisecond, "lock TTL"},
		{"etcd", time.Second, time.Second, "etcd session TTL"},
		{"etcd", 1500 * time.Millisecond, 2 * time.Second, "etcd session TTL"},
		{"zookeeper", time.Second, zkSessionTimeout, "ZooKeeper session timeout"},
		{"postgres", time.Second, time.Second, "idle_session_timeout"},
	} {
		cc := DefaultConfig()
		cc.LockTTL = tc.ttl
		e := &chaosEnv{cc: cc, plan: chaosPlan{sc: scenarioByName("pause-holder"), backend: tc.backend}}
		got, what := leaseExpiry(e)
		if got != tc.want || !strings.Contains(what, tc.what) {
			t.Errorf("%s, --lock-ttl=%v: %v (%s), want %v (%s)", tc.backend, tc.ttl, got, what, tc.want, tc.what)
		}
	}
}

func TestChaosPlanAndValidate(t *testing.T) {
	cc := DefaultConfig()
	cc.Bin = "/bin/sh" // any executable file
	cc.Scenarios = Scenarios
	if err := cc.Validate(); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, s := range scenarios {
		want += len(s.Backends) * len(cc.Fencing)
	}
	if n := len(cc.plan()); n != want || want < 2*len(scenarios) {
		t.Fatalf("--scenario=all plans %d runs, want %d (each scenario on each of its backends × 2 fencing modes)", n, want)
	}
	cc.Backends = []string{"postgres"}
	if n := len(cc.plan()); n != 2 {
		t.Fatalf("--backend=postgres plans %d runs, want 2", n)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.Scenarios = []string{"nope"} },
		func(c *Config) { c.Scenarios = []string{"kill-zk-node"}; c.Backends = []string{"redis"} },
		func(c *Config) { c.Fencing = []string{"maybe"} },
		func(c *Config) { c.Instances = 2 },
		func(c *Config) { c.Bin = "/nonexistent" },
	} {
		c := DefaultConfig()
		c.Bin, c.Scenarios = "/bin/sh", []string{"pause-holder"}
		bad(&c)
		if c.Validate() == nil {
			t.Errorf("config %+v: want an error", c)
		}
	}
}

// sampleChaosResult is two runs as Execute would report them.
func sampleChaosResult() *Result {
	rec := 68.0
	at, heal := 1100.0, 3100.0
	mk := func(fencing string, oversold, lost, stale int64) Run {
		r := Run{Scenario: "pause-holder", Backend: "redis", Fencing: fencing, Instances: 3, LockTTL: "1s",
			Expect: ExpectSafe, DurationS: 5, StaleWritesRejected: stale, RecoveryMs: &rec, BucketMs: 100,
			Orders: tally.OrderCounts{Sent: 500, Reserved: 480, StaleFence: int(stale), LockUnavailable: 20},
			Units:  tally.UnitCounts{Stock: 100000, Reserved: 1000, Oversold: oversold, Lost: lost},
			Fault:  FaultFigures{FaultAtMs: &at, HealAtMs: &heal, WindowsMs: [][2]float64{{at, heal}}},
			Events: []Event{
				{AtMs: 1000, Kind: EventNote, What: "instance 3: 1 orders sent with X-Chaos-Pause: 1s"},
				{AtMs: at, Kind: EventFault, What: "SIGSTOP instance 3 <pid 42> & co"},
				{AtMs: heal, Kind: EventHeal, What: "SIGCONT instance 3"},
				{AtMs: heal + rec, Kind: EventOutcome, What: "recovered"},
			},
		}
		for i := range 50 {
			r.Timeline = append(r.Timeline, Bucket{AtMs: i * 100, Reserved: 10 + i%7, StaleFence: i % 11 / 10, LockUnavailable: i % 13 / 12})
		}
		if fencing == "off" {
			r.Expect = ExpectDamage
		}
		r.Verification.Oversold, r.Verification.Lost = oversold, lost
		if oversold+lost > 0 {
			r.Verification.DisagreementCount = 2
		}
		r.Verdict = chaosVerdict(&r)
		r.judge(scenarioByName("pause-holder"))
		return r
	}
	res := &Result{GeneratedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Seed: 7, Instances: 3, LockTTL: "1s",
		Runs: []Run{mk("on", 0, 0, 2), mk("off", 237, 237, 0)}}
	res.Pass = res.Runs[0].Pass && res.Runs[1].Pass
	return res
}

func TestChaosReportIsSelfContained(t *testing.T) {
	res := sampleChaosResult()
	if !res.Pass {
		t.Fatalf("sample runs should pass: %v %v", res.Runs[0].Failures, res.Runs[1].Failures)
	}
	var buf bytes.Buffer
	if err := report.Write(&buf, Report(res)); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	for _, want := range []string{"Scenarios × fencing", "pause-holder · redis · fencing off", "<svg", "fault in force",
		"safe: 0 oversold, 0 lost; 2 stale writes rejected", "UNSAFE: 237 units oversold, 237 lost", "PASS: damage, as expected without the fence",
		"SIGSTOP instance 3 &lt;pid 42&gt; &amp; co"} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	external := regexp.MustCompile(`(?i)(\bsrc\s*=|href\s*=\s*"(https?:)?//|@import|url\(|<link\b|<script\b)`)
	if m := external.FindString(html); m != "" {
		t.Errorf("report references something external: %q", m)
	}
	for _, bad := range []string{"NaN", "Inf", "<pid"} {
		if strings.Contains(html, bad) {
			t.Errorf("report contains %q", bad)
		}
	}
	md := MarkdownTable(res)
	if strings.Count(md, "\n") != 4 || !strings.Contains(md, "| pause-holder | redis | off |") {
		t.Errorf("markdown table:\n%s", md)
	}
	var table bytes.Buffer
	PrintTable(&table, res)
	if !strings.Contains(table.String(), "PASS") {
		t.Errorf("table:\n%s", table.String())
	}
}

func TestChaosTimelineChartEmptyRun(t *testing.T) {
	c := timelineChart("t", Run{})
	if s := string(c.SVG); !strings.HasPrefix(s, "<svg") || strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
		t.Fatalf("empty run: %.300s", s)
	}
}

// TestChaosReconcileSettlesOnlyOnASettlingAnswer: a resend shed with a 503
// decides nothing about the first attempt, which may still be running on
// another instance: the order stays unresolved (the run inconclusive), not
// reconciled with no units booked (a fenced run would then blame the
// backend for "lost" units). A 201 to a later resend is booked.
func TestChaosReconcileSettlesOnlyOnASettlingAnswer(t *testing.T) {
	var shed atomic.Bool
	shed.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if shed.Load() {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"lock_unavailable","message":"busy","request_id":"r"}}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"order_id":"0190a3e4-7c1d-7b2a-9f00-000000000001","status":"reserved","lines":[{"sku":"s","quantity":1,"fence_token":7}],"expires_at":"2030-01-01T00:00:00Z"}`)
	}))
	t.Cleanup(srv.Close)
	req := client.OrderRequest{Lines: []client.OrderLine{{SKU: "s", Quantity: 1}}}
	body := []byte(`{"lines":[{"sku":"s","quantity":1}]}`)
	l := newChaosLoad([]string{srv.URL}, []string{"s"}, "t", 1, time.Second)
	l.pending = []pendingOrder{{key: "k1", body: body, req: req}}
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	if rec, unres := l.reconcile(ctx); rec != 0 || unres != 1 || l.receipts.Units("s") != 0 {
		t.Fatalf("503s to every resend: reconciled %d, unresolved %d, units %d; want 0, 1, 0", rec, unres, l.receipts.Units("s"))
	}
	// Marked, so that the verification allows for its unit: a gap it
	// explains is inconclusive, not a lost unit.
	if n, u := l.receipts.Unresolved(), l.receipts.UnresolvedUnits("s"); n != 1 || u != 1 {
		t.Fatalf("receipts after an unresolved order: %d unresolved, %d units; want 1, 1", n, u)
	}
	time.AfterFunc(150*time.Millisecond, func() { shed.Store(false) })
	if rec, unres := l.reconcile(t.Context()); rec != 1 || unres != 0 || l.receipts.Units("s") != 1 {
		t.Fatalf("a 201 after a 503: reconciled %d, unresolved %d, units %d; want 1, 0, 1", rec, unres, l.receipts.Units("s"))
	}
	if n, u := l.receipts.Unresolved(), l.receipts.UnresolvedUnits("s"); n != 0 || u != 0 {
		t.Fatalf("receipts once the order is settled: %d unresolved, %d units; want 0, 0", n, u)
	}
}

// TestChaosVerdictUnresolved: orders whose outcome stayed unknown make the
// verdict inconclusive, never "safe".
func TestChaosVerdictUnresolved(t *testing.T) {
	r := Run{Orders: tally.OrderCounts{Sent: 10, Unresolved: 2}, Verification: run.Verification{Unresolved: 2}}
	if v := chaosVerdict(&r); !strings.HasPrefix(v, "INCONCLUSIVE") || !strings.Contains(v, "2 orders") {
		t.Fatalf("verdict with 2 unresolved orders: %q", v)
	}
}

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/stack/pgproxy"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/history"
	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/run"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// TestChaosJudgeExercisedInEveryMode: what shows that a scenario's fault
// happened is checked with fencing off too, not only what shows it was
// safe: an unfenced lost-commit-ack that dropped no answer, a
// kill-redis-majority without a single 503 lock_unavailable, a
// postgres-restart without a 503 store_unavailable, a session expiry the
// instance never noticed, a partition that never cost the holder its
// lease, all fail, fenced or not.
func TestChaosJudgeExercisedInEveryMode(t *testing.T) {
	recovered := 50.0
	off := func(name string) string { return scenarioPlan(scenarioByName(name), "off").expect() }
	acks := func(expect string, la LostAcks) Run {
		return Run{Expect: expect, RecoveryMs: &recovered, History: &HistoryCheck{Operations: 9, LostAcks: &la}}
	}
	damaged := tally.UnitCounts{Oversold: 25, Lost: 25}
	cases := []struct {
		name, scenario string
		run            Run
		pass           bool
	}{
		{"lost-commit-ack fenced, nothing dropped", "lost-commit-ack", acks(ExpectSafe, LostAcks{Rounds: 3}), false},
		{"lost-commit-ack unfenced, nothing dropped", "lost-commit-ack", acks(off("lost-commit-ack"), LostAcks{Rounds: 3}), false},
		{"lost-commit-ack unfenced, a drop before the commit", "lost-commit-ack", acks(off("lost-commit-ack"), LostAcks{Rounds: 3, Dropped: 3, Committed: 2, Replayed: 3, OrdersPerKey: 1}), false},
		{"lost-commit-ack unfenced, no probe", "lost-commit-ack", Run{Expect: off("lost-commit-ack")}, false},
		{"lost-commit-ack unfenced, every round dropped a committed answer", "lost-commit-ack", acks(off("lost-commit-ack"), LostAcks{Rounds: 3, Dropped: 3, Committed: 3, Replayed: 3, OrdersPerKey: 1}), true},
		{"kill-redis-majority unfenced, no 503", "kill-redis-majority", Run{Expect: off("kill-redis-majority"), RecoveryMs: &recovered}, false},
		{"kill-redis-majority unfenced, 503s", "kill-redis-majority", Run{Expect: off("kill-redis-majority"), Fault: FaultFigures{LockUnavailableDuring: 4}}, true},
		{"postgres-restart unfenced, no store_unavailable", "postgres-restart", Run{Expect: off("postgres-restart"), History: &HistoryCheck{}}, false},
		{"postgres-restart unfenced, store_unavailable", "postgres-restart", Run{Expect: off("postgres-restart"), History: &HistoryCheck{StoreUnavailable: 2}}, true},
		{"zk-session-expiry unfenced, damage, session never lost", "zk-session-expiry", Run{Expect: off("zk-session-expiry"), Units: damaged, Metrics: map[string]float64{}}, false},
		{"zk-session-expiry unfenced, damage, session lost", "zk-session-expiry", Run{Expect: off("zk-session-expiry"), Units: damaged, Metrics: map[string]float64{metricZKSessLost: 1}}, true},
		{"partition-holder unfenced, damage, lease never lost", "partition-holder", Run{Expect: off("partition-holder"), Units: damaged, Metrics: map[string]float64{}}, false},
		{"partition-holder unfenced, damage, victim's final scrape failed", "partition-holder", Run{Expect: off("partition-holder"), Units: damaged, Metrics: map[string]float64{metricVictimLeasesLost: -2}}, false},
		{"partition-holder unfenced, damage, lease lost", "partition-holder", Run{Expect: off("partition-holder"), Units: damaged, Metrics: map[string]float64{metricVictimLeasesLost: 1}}, true},
	}
	for _, tc := range cases {
		sc := scenarioByName(tc.scenario)
		if sc == nil {
			t.Fatalf("no scenario %q", tc.scenario)
		}
		r := tc.run
		r.judge(sc)
		if r.Pass != tc.pass {
			t.Errorf("%s: pass = %v (%v), want %v", tc.name, r.Pass, r.Failures, tc.pass)
		}
	}
}

// TestChaosTallyDropsFailsShortRounds: lost-commit-ack's fault fails
// unless every round dropped an answer Postgres had committed (a proxy
// rule that stopped matching the write drops nothing).
func TestChaosTallyDropsFailsShortRounds(t *testing.T) {
	committed := pgproxy.Drop{Answer: "INSERT 0 1", TxnStatus: 'I'}
	refused := pgproxy.Drop{Answer: "error: 23505", TxnStatus: 'I'}
	for _, tc := range []struct {
		name  string
		drops []pgproxy.Drop
		ok    bool
	}{
		{"none", nil, false},
		{"two of three", []pgproxy.Drop{committed, committed}, false},
		{"one before the commit", []pgproxy.Drop{committed, refused, committed}, false},
		{"all three committed", []pgproxy.Drop{committed, committed, committed}, true},
	} {
		la := LostAcks{Rounds: 3}
		err := tallyDrops(&la, tc.drops)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok %v (figures %+v)", tc.name, err, tc.ok, la)
		}
		if la.Dropped != len(tc.drops) {
			t.Errorf("%s: Dropped = %d, want %d", tc.name, la.Dropped, len(tc.drops))
		}
	}
}

// faultEnv is an environment with a load whose outcomes are given and a
// fault window [cut, heal], as fill sees them once the load stopped.
func faultEnv(outs []chaosOutcome, cut, heal time.Duration) *chaosEnv {
	e := &chaosEnv{cc: Config{Stock: 1000}, load: newChaosLoad([]string{"http://127.0.0.1:1"}, []string{"s"}, "t", 1, time.Second)}
	e.load.outcomes = outs
	e.faultAt, e.healAt, e.healed = cut, heal, true
	e.windows = [][2]time.Duration{{cut, heal}}
	return e
}

// TestChaosFillCountsOnlyOrdersSentDuringTheFault: orders already in flight
// when the fault began, answered just after, do not count as served during
// it: with 201s up to the cut, three orders sent before it and answered
// 1–3 ms after, and nothing more until after the heal, nothing was reserved
// during the fault, and the in-fault check fails.
func TestChaosFillCountsOnlyOrdersSentDuringTheFault(t *testing.T) {
	const msec = time.Millisecond
	cut, heal, end := 2000*msec, 7700*msec, 10000*msec
	var outs []chaosOutcome
	for at := time.Duration(0); at+5*msec <= cut; at += 10 * msec {
		outs = append(outs, chaosOutcome{sent: at, done: at + 5*msec, kind: client.KindReserved})
	}
	for i := range 3 {
		outs = append(outs, chaosOutcome{sent: cut - 4*msec, done: cut + time.Duration(i+1)*msec, kind: client.KindReserved, inst: i})
	}
	for at := heal + 20*msec; at < end; at += 10 * msec {
		outs = append(outs, chaosOutcome{sent: at, done: at + 5*msec, kind: client.KindReserved})
	}
	fillRun := func(outs []chaosOutcome) Run {
		e := faultEnv(outs, cut, heal)
		r := Run{Expect: ExpectSafe, Metrics: map[string]float64{}}
		e.fill(&r, run.Verification{}, map[string]float64{}, end)
		return r
	}
	r := fillRun(outs)
	if r.Fault.ReservedDuring != 0 {
		t.Errorf("ReservedDuring = %d, want 0: the three were sent before the cut", r.Fault.ReservedDuring)
	}
	if r.LongestGapMs < 5000 {
		t.Errorf("LongestGapMs = %v, want the gap across the fault", r.LongestGapMs)
	}
	for _, name := range []string{"partition-zk-leader", "partition-lock-minority", "kill-redis-minority", "kill-etcd-member"} {
		j := r
		j.judge(scenarioByName(name))
		if j.Pass {
			t.Errorf("%s passed with no order sent and served during the fault", name)
		}
	}
	// One order sent after the cut and answered before the heal counts.
	r = fillRun(append(outs, chaosOutcome{sent: cut + 100*msec, done: cut + 110*msec, kind: client.KindReserved},
		chaosOutcome{sent: cut - time.Second, done: cut + 200*msec, kind: client.KindLockUnavailable},
		chaosOutcome{sent: cut + 300*msec, done: cut + 310*msec, kind: client.KindLockUnavailable}))
	if r.Fault.ReservedDuring != 1 || r.Fault.LockUnavailableDuring != 1 {
		t.Errorf("ReservedDuring = %d, LockUnavailableDuring = %d, want 1 and 1", r.Fault.ReservedDuring, r.Fault.LockUnavailableDuring)
	}
	j := r
	if j.judge(scenarioByName("partition-zk-leader")); !j.Pass {
		t.Errorf("partition-zk-leader with an order served during the fault: %v", j.Failures)
	}
}

// TestChaosNemesisForcedRaceMissingFails: the nemesis's forced pause whose
// order never reaches its stall fails the step, in either fencing mode,
// instead of leaving the race to whatever a random pause happens to do.
func TestChaosNemesisForcedRaceMissingFails(t *testing.T) {
	t.Parallel()
	sc := scenarioByName("nemesis")
	e := newChaosEnv(Config{LockTTL: time.Second, RequestTimeout: time.Second}, chaosPlan{sc: sc, backend: "redlock", fencing: "off"}, t.TempDir(), nil)
	e.ins = []instance{deafInstance{log: filepath.Join(e.dir, "victim.log")}}
	e.load = newChaosLoad(e.urls(), []string{"sku-a"}, "nemesis-test", 1, time.Second)
	rec := &histRecorder{client: client.New(4, "", time.Second), urls: e.urls(), skus: []string{"sku-h0"}, runID: "nemesis-test"}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(func() {
		cancel()
		rec.stop()
	})
	err := e.nemesisPauseHolder(ctx, rec, nemesisStep{Kind: nemPauseHolder, For: time.Second})
	if err == nil || !strings.Contains(err.Error(), "forced") {
		t.Fatalf("forced pause without a stall: err = %v, want an error", err)
	}
}

// TestChaosStatusOfARunThatShowedNothing: a run that failed only because
// its fault was not exercised, with nothing oversold or lost, is not
// reported UNSAFE (red), in the table, the report or the JSON; a fenced
// run with damage is.
func TestChaosStatusOfARunThatShowedNothing(t *testing.T) {
	ph := scenarioByName("pause-holder")
	orders := tally.OrderCounts{Sent: 100, Reserved: 100}
	cases := []struct {
		name       string
		run        Run
		status     report.Status
		json, text string
	}{
		{"fenced, not exercised", Run{Expect: ExpectSafe, Orders: orders}, report.StatusError, StatusFailed, "FAIL, no damage: "},
		{"unfenced, not exercised", Run{Expect: ExpectDamage, Orders: orders}, report.StatusError, StatusFailed, "FAIL, no damage: "},
		{"fenced, oversold", Run{Expect: ExpectSafe, Orders: orders, StaleWritesRejected: 1, Units: tally.UnitCounts{Oversold: 3, Lost: 3}}, report.StatusUnsafe, StatusUnsafe, "FAIL, UNSAFE: "},
		{"fenced, history violated", Run{Expect: ExpectSafe, Orders: orders, StaleWritesRejected: 1, History: &HistoryCheck{Violations: []HistoryViolation{{SKU: "s", Rule: "r"}}}}, report.StatusUnsafe, StatusUnsafe, "FAIL, UNSAFE: "},
		{"did not start", Run{Expect: ExpectSafe, Error: "start instances: boom"}, report.StatusError, StatusError, "FAIL, error: "},
		{"fault failed mid-run", Run{Expect: ExpectSafe, Orders: orders, Error: "fault: boom"}, report.StatusError, StatusError, "FAIL, error: "},
		{"fault failed mid-run, oversold", Run{Expect: ExpectSafe, Orders: orders, Error: "fault: boom", Units: tally.UnitCounts{Oversold: 1}}, report.StatusUnsafe, StatusUnsafe, "FAIL, UNSAFE: "},
		{"unfenced, damage, 500s", Run{Expect: ExpectDamage, Orders: orders, Units: tally.UnitCounts{Oversold: 3}, History: &HistoryCheck{Internal: 1}}, report.StatusError, StatusFailed, "FAIL: "},
		{"fenced, safe", Run{Expect: ExpectSafe, Orders: orders, StaleWritesRejected: 1}, report.StatusSafe, StatusSafe, "PASS: safe"},
		{"unfenced, damage", Run{Expect: ExpectDamage, Orders: orders, Units: tally.UnitCounts{Oversold: 3}}, report.StatusExpectedUnsafe, StatusExpectedUnsafe, "PASS: damage"},
	}
	for _, tc := range cases {
		r := tc.run
		r.Verdict = chaosVerdict(&r)
		r.judge(ph)
		if got := chaosStatus(r); got != tc.status {
			t.Errorf("%s: report status %q, want %q (failures %v)", tc.name, got, tc.status, r.Failures)
		}
		if got := shortVerdict(r); !strings.HasPrefix(got, tc.text) {
			t.Errorf("%s: verdict %q, want it to start %q", tc.name, got, tc.text)
		}
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(raw, &back); err != nil || back.Status != tc.json {
			t.Errorf("%s: JSON status %q (%v), want %q", tc.name, back.Status, err, tc.json)
		}
		rows := Report(&Result{Runs: []Run{r}}).Sections[0].Table.Rows
		if rows[0].Status != tc.status {
			t.Errorf("%s: report row %q, want %q", tc.name, rows[0].Status, tc.status)
		}
	}
}

// sessionInstance is an instance whose /debug/zk-session is served by a
// test server.
type sessionInstance struct{ url string }

func (s sessionInstance) baseURL() string             { return s.url }
func (s sessionInstance) logFile() string             { return os.DevNull }
func (s sessionInstance) pid() int                    { return 0 }
func (s sessionInstance) signal(syscall.Signal) error { return nil }

// TestChaosNewZKSessionWaitIsBounded: zk-session-expiry's wait for the
// instance's new session ends at its limit, also when each request hangs
// (the admin client's own timeout is 10 s), and fails then.
func TestChaosNewZKSessionWaitIsBounded(t *testing.T) {
	const old = 0x51
	var next atomic.Int64
	next.Store(old)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch id := next.Load(); id {
		case 0: // hangs
			<-r.Context().Done()
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"session_id":%d,"session_id_hex":"%x","password_hex":"00ff"}`, id, id)
		}
	}))
	t.Cleanup(srv.Close)
	sc := scenarioByName("zk-session-expiry")
	e := newChaosEnv(Config{LockTTL: time.Second, RequestTimeout: time.Second}, chaosPlan{sc: sc, backend: "zookeeper", fencing: "on"}, t.TempDir(), nil)
	e.ins = []instance{sessionInstance{url: srv.URL}}
	t.Cleanup(e.client.Close)
	const limit = 700 * time.Millisecond
	wait := func() (error, time.Duration) {
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- e.awaitNewZKSession(t.Context(), 0, old, limit) }()
		select {
		case err := <-done:
			return err, time.Since(start)
		case <-time.After(limit + 5*time.Second):
			return fmt.Errorf("still waiting %v after its %v limit", 5*time.Second, limit), -1
		}
	}
	for _, tc := range []struct {
		name string
		id   int64
		ok   bool
	}{{"same session", old, false}, {"requests hang", 0, false}, {"new session", 0x52, true}} {
		next.Store(tc.id)
		err, took := wait()
		if (err == nil) != tc.ok || took < 0 || took > limit+2*time.Second {
			t.Errorf("%s: err = %v after %v, want ok %v within about %v", tc.name, err, took, tc.ok, limit)
		}
	}
}

// TestChaosInterruptGuard: while a run has not finished its teardown, the
// first signal after the interrupt is held once, with a message that names
// what a forced exit leaves and what removes it; the next one is not held.
// With no run in progress nothing is held: the second Ctrl-C kills.
func TestChaosInterruptGuard(t *testing.T) {
	var g InterruptGuard
	var out strings.Builder
	if g.Hold(&out) {
		t.Fatal("held a signal with no run in progress")
	}
	trackRun(t.Context())() // a context without the guard counts nothing
	done := trackRun(WithInterruptGuard(t.Context(), &g))
	if !g.Hold(&out) {
		t.Fatal("did not hold the first signal during a run's teardown")
	}
	msg := out.String()
	for _, want := range []string{fmt.Sprintf("%s%d.", netPrefix, os.Getpid()), "load chaos", "again"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if g.Hold(&out) {
		t.Error("held a second signal: a hung teardown could not be interrupted")
	}
	done()
	g.held.Store(false)
	if g.Hold(&out) {
		t.Error("held a signal after the teardown was over")
	}
}

// TestChaosIdempotencyJudgedInEveryMode: that a same-key retry returns the
// first order and that one key makes one order has nothing to do with the
// fence (the unique index on the key decides it), so an unfenced run that
// broke it fails, as unsafe, like a fenced one; the rules a stale write
// breaks (units, linearizability) stay for fenced runs only.
func TestChaosIdempotencyJudgedInEveryMode(t *testing.T) {
	recovered := 50.0
	off := func(name string) string { return scenarioPlan(scenarioByName(name), "off").expect() }
	rule := func(r history.Rule, msg string) []HistoryViolation {
		return []HistoryViolation{{SKU: "h00", Rule: string(r), Message: msg}}
	}
	doubled := rule(history.RuleOrders, `one placement made 2 orders: key "k" has orders a, b in the final read`)
	oversold := rule(history.RuleUnits, "oversold: 12 units acknowledged and never returned, stock 10")
	acks := func(la LostAcks) *HistoryCheck { return &HistoryCheck{Operations: 9, LostAcks: &la} }
	restart := func(h HistoryCheck) *HistoryCheck { h.StoreUnavailable = 2; return &h }
	cases := []struct {
		name, scenario string
		run            Run
		pass           bool
		status         string
	}{
		{"lost-commit-ack unfenced, every retry returned another order, one key made 2 orders", "lost-commit-ack",
			Run{Expect: off("lost-commit-ack"), History: acks(LostAcks{Rounds: 3, Dropped: 3, Committed: 3, Mismatched: 3, OrdersPerKey: 2})}, false, StatusUnsafe},
		{"lost-commit-ack unfenced, a retry never settled", "lost-commit-ack",
			Run{Expect: off("lost-commit-ack"), History: acks(LostAcks{Rounds: 3, Dropped: 3, Committed: 3, Replayed: 2, Mismatched: 1, OrdersPerKey: 1})}, false, StatusFailed},
		{"lost-commit-ack unfenced, every retry replayed", "lost-commit-ack",
			Run{Expect: off("lost-commit-ack"), History: acks(LostAcks{Rounds: 3, Dropped: 3, Committed: 3, Replayed: 3, OrdersPerKey: 1})}, true, StatusSafe},
		{"postgres-restart unfenced, one key made 2 orders", "postgres-restart",
			Run{Expect: off("postgres-restart"), RecoveryMs: &recovered, History: restart(HistoryCheck{DoubledKeys: 1, Violations: doubled})}, false, StatusUnsafe},
		{"postgres-restart unfenced, an acknowledged cancel not in the final read", "postgres-restart",
			Run{Expect: off("postgres-restart"), RecoveryMs: &recovered, History: restart(HistoryCheck{Violations: rule(history.RuleTransitions, "order o was acknowledged cancelled but the final read says reserved")})}, false, StatusUnsafe},
		{"postgres-restart unfenced, oversold", "postgres-restart",
			Run{Expect: off("postgres-restart"), RecoveryMs: &recovered, History: restart(HistoryCheck{Violations: oversold})}, true, StatusExpectedUnsafe},
		{"postgres-restart fenced, oversold", "postgres-restart",
			Run{Expect: ExpectSafe, RecoveryMs: &recovered, History: restart(HistoryCheck{Violations: oversold})}, false, StatusUnsafe},
	}
	for _, tc := range cases {
		r := tc.run
		r.judge(scenarioByName(tc.scenario))
		if r.Pass != tc.pass || r.Status != tc.status {
			t.Errorf("%s (expect %s): pass = %v, status %q, failures %v; want pass = %v, status %q",
				tc.name, r.Expect, r.Pass, r.Status, r.Failures, tc.pass, tc.status)
		}
	}
}

// TestChaosRecorderRetryAnswerSettlesOnlyWhatItSettles: the recorder ends
// an operation on an answer only if it settles what became of every
// attempt (client.Outcome.Settled), or answers the first attempt. A 409
// stale_fence or insufficient_stock to a same-key retry, after an attempt
// that went unanswered and commits later, settles nothing: recorded as a
// refusal, it made the checker blame the service for the order the first
// attempt committed. Retried until the replay, the operation is OK; with
// the attempts run out on such an answer, unknown. A first attempt's
// refusal is still one.
func TestChaosRecorderRetryAnswerSettlesOnlyWhatItSettles(t *testing.T) {
	const orderID = "0190a3e4-7c1d-7b2a-9f00-000000000001"
	order := func(status string) string {
		return `{"order_id":"` + orderID + `","status":"` + status + `","lines":[{"sku":"s","quantity":2,"fence_token":9}],"expires_at":"2030-01-01T00:00:00Z"}`
	}
	refused := func(code string) string {
		return `{"error":{"code":"` + code + `","message":"refused","request_id":"r"}}`
	}
	type answer struct {
		status int
		body   string
		slow   bool // past the client's timeout: the attempt goes unanswered
	}
	reserved := answer{http.StatusCreated, order("reserved"), false}
	unanswered := answer{http.StatusCreated, order("reserved"), true}
	conflict := func(code string) answer { return answer{http.StatusConflict, refused(code), false} }
	cases := []struct {
		name    string
		kind    history.Kind
		answers []answer // the last repeats
		want    history.Result
		code    string
	}{
		{"place: stale_fence after an unanswered attempt, then the replay", history.Place,
			[]answer{unanswered, conflict("stale_fence"), reserved}, history.OK, ""},
		{"place: insufficient_stock after an unanswered attempt, then the replay", history.Place,
			[]answer{unanswered, conflict("insufficient_stock"), reserved}, history.OK, ""},
		{"place: insufficient_stock to every retry after an unanswered attempt", history.Place,
			[]answer{unanswered, conflict("insufficient_stock")}, history.Unknown, "insufficient_stock"},
		{"place: stale_fence to the first attempt", history.Place,
			[]answer{conflict("stale_fence")}, history.Failed, "stale_fence"},
		{"confirm: stale_fence after an unanswered attempt, then confirmed", history.Confirm,
			[]answer{{http.StatusOK, order("confirmed"), true}, conflict("stale_fence"), {http.StatusOK, order("confirmed"), false}}, history.OK, ""},
		{"cancel: invalid_transition after an unanswered attempt", history.Cancel,
			[]answer{{http.StatusOK, order("cancelled"), true}, conflict("invalid_transition")}, history.Failed, "invalid_transition"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var attempts atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				a := tc.answers[min(int(attempts.Add(1)), len(tc.answers))-1]
				if a.slow {
					time.Sleep(400 * time.Millisecond)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(a.status)
				_, _ = io.WriteString(w, a.body)
			}))
			t.Cleanup(srv.Close)
			c := client.New(4, "", 150*time.Millisecond)
			t.Cleanup(c.Close)
			r := &histRecorder{urls: []string{srv.URL}, skus: []string{"s"}, stock: 10, runID: "t", client: c}
			var out history.Outcome
			if tc.kind == history.Place {
				out = r.place(t.Context(), 0, 0, []history.Line{{SKU: "s", Quantity: 2}}, 0)
			} else {
				out = r.transition(t.Context(), 0, 0, tc.kind, orderID)
			}
			if out.Result != tc.want || out.Code != tc.code {
				t.Errorf("recorded %s %q after %d attempts, want %s %q", out.Result, out.Code, attempts.Load(), tc.want, tc.code)
			}
		})
	}
}

// TestChaosRecorderKeepsFenceTokens: an acknowledged place is recorded
// with the fence token of each line the service answered, which the
// history's tokens rule compares; a recorder that dropped them made every
// line token 0, and the rule could never fire.
func TestChaosRecorderKeepsFenceTokens(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"order_id":"0190a3e4-7c1d-7b2a-9f00-000000000002","status":"reserved",`+
			`"lines":[{"sku":"s","quantity":2,"fence_token":41},{"sku":"t","quantity":1,"fence_token":7}],"expires_at":"2030-01-01T00:00:00Z"}`)
	}))
	t.Cleanup(srv.Close)
	c := client.New(4, "", time.Second)
	t.Cleanup(c.Close)
	r := &histRecorder{urls: []string{srv.URL}, skus: []string{"s", "t"}, stock: 10, runID: "t", client: c}
	out := r.place(t.Context(), 0, 0, []history.Line{{SKU: "s", Quantity: 2}, {SKU: "t", Quantity: 1}}, 0)
	want := []history.Line{{SKU: "s", Quantity: 2, Token: 41}, {SKU: "t", Quantity: 1, Token: 7}}
	if out.Result != history.OK || !slices.Equal(out.Lines, want) {
		t.Fatalf("recorded %s with lines %+v, want ok with %+v", out.Result, out.Lines, want)
	}
	if ops := r.h.Ops(); len(ops) != 1 || !slices.Equal(ops[0].Outcome.Lines, want) {
		t.Fatalf("history holds %+v, want one place with lines %+v", ops, want)
	}
}

// TestChaosFinalReadKeepsLineTokens: the final read, straight from
// Postgres, gives each order line the fence token it was written under, so
// an Unknown place the read settles is judged by the tokens rule too.
func TestChaosFinalReadKeepsLineTokens(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dsn := stacktest.NewDatabase(t, ctx)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	if _, err := postgres.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	const id = "0190a3e4-7c1d-7b2a-9f00-000000000003"
	for _, q := range []string{
		`INSERT INTO skus (sku, available, reserved, received, fence_token) VALUES ('s', 7, 3, 10, 12), ('t', 9, 1, 10, 3000000000)`,
		`INSERT INTO orders (id, idempotency_key, request_hash, status, expires_at) VALUES ('` + id + `', 'k1', 'h', 'reserved', now() + interval '15 minutes')`,
		`INSERT INTO order_lines (order_id, sku, quantity, fence_token, position) VALUES ('` + id + `', 's', 3, 12, 0), ('` + id + `', 't', 1, 3000000000, 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	final, err := readFinal(ctx, func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, dsn) }, []string{"s", "t"})
	if err != nil {
		t.Fatal(err)
	}
	want := []history.Line{{SKU: "s", Quantity: 3, Token: 12}, {SKU: "t", Quantity: 1, Token: 3_000_000_000}}
	if len(final.Orders) != 1 || final.Orders[0].Key != "k1" || !slices.Equal(final.Orders[0].Lines, want) {
		t.Fatalf("final read orders %+v, want one order k1 with lines %+v", final.Orders, want)
	}
}

// TestChaosTokenDecreaseJudgedAsFenceDamage: a token that went down is a
// stale lease's write the store accepted, which only the fence stops. A
// fenced run that shows one fails as unsafe; an unfenced run counts it as
// the damage it may (postgres-restart) or must (nemesis) show, and passes.
func TestChaosTokenDecreaseJudgedAsFenceDamage(t *testing.T) {
	recovered := 50.0
	off := func(name string) string { return scenarioPlan(scenarioByName(name), "off").expect() }
	decrease := func() *HistoryCheck {
		return &HistoryCheck{Operations: 9, StoreUnavailable: 2, Violations: []HistoryViolation{{SKU: "h00", Rule: string(history.RuleTokens),
			Message: "order o2, invoked at 1.200s, was written with token 5, below token 8 of order o1, acknowledged at 1.100s"}}}
	}
	cases := []struct {
		name, scenario string
		run            Run
		pass           bool
		status, text   string
	}{
		{"postgres-restart fenced", "postgres-restart",
			Run{Expect: ExpectSafe, RecoveryMs: &recovered, History: decrease()}, false, StatusUnsafe, "FAIL, UNSAFE: history: SKU h00: tokens: "},
		{"postgres-restart unfenced", "postgres-restart",
			Run{Expect: off("postgres-restart"), RecoveryMs: &recovered, History: decrease()}, true, StatusExpectedUnsafe, "PASS: damage possible without the fence"},
		{"nemesis unfenced, the counters intact", "nemesis",
			Run{Expect: off("nemesis"), History: decrease()}, true, StatusExpectedUnsafe, "PASS: damage, as expected without the fence"},
	}
	for _, tc := range cases {
		r := tc.run
		r.judge(scenarioByName(tc.scenario))
		if r.Pass != tc.pass || r.Status != tc.status || !strings.HasPrefix(shortVerdict(r), tc.text) {
			t.Errorf("%s (expect %s): pass = %v, status %q, verdict %q; want pass = %v, status %q, verdict %q…",
				tc.name, r.Expect, r.Pass, r.Status, shortVerdict(r), tc.pass, tc.status, tc.text)
		}
	}
}

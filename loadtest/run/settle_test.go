package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/fakeservice"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// scripted puts a script in front of a service's POST /v1/orders: the n-th
// request with a key (from 1) is answered by answer, which may pass it on
// to the service; every other request goes straight to it.
type scripted struct {
	next   http.Handler
	answer func(n int, w http.ResponseWriter, r *http.Request, next http.Handler)

	mu   sync.Mutex
	seen map[string]int
}

func script(t *testing.T, next http.Handler, answer func(int, http.ResponseWriter, *http.Request, http.Handler)) string {
	t.Helper()
	s := httptest.NewServer(&scripted{next: next, answer: answer, seen: map[string]int{}})
	t.Cleanup(s.Close)
	return s.URL
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/orders" {
		s.next.ServeHTTP(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.seen[key]++
	n := s.seen[key]
	s.mu.Unlock()
	s.answer(n, w, r, s.next)
}

// refuse answers status and code in the API's error shape; every 503 of
// the service carries Retry-After.
func refuse(w http.ResponseWriter, status int, code string) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": code}})
}

// lostAck places the order, then answers as if the commit's acknowledgement
// was lost: 503 store_unavailable, the outcome unknown to the client.
func lostAck(w http.ResponseWriter, r *http.Request, next http.Handler) {
	next.ServeHTTP(httptest.NewRecorder(), r)
	refuse(w, http.StatusServiceUnavailable, "store_unavailable")
}

// TestRunShedRetryIsNoMismatch: a deliberate retry of an order that got its
// 201, shed with 503 overloaded, contradicts nothing: the run is safe and
// the retry counted unsettled, not mismatched.
func TestRunShedRetryIsNoMismatch(t *testing.T) {
	f := fakeservice.New("secret", false)
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		if n == 2 {
			refuse(w, http.StatusServiceUnavailable, "overloaded")
			return
		}
		next.ServeHTTP(w, r)
	})
	cfg := testConfig(u)
	cfg.Orders, cfg.Workload.RetryShare = 100, 1
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := res.Orders
	if !res.Safe || o.RetryMismatch != 0 || o.Retries != 100 || o.RetryUnsettled != 100 {
		t.Fatalf("%s: retries %d, mismatched %d, unsettled %d; %v", res.Verdict, o.Retries, o.RetryMismatch, o.RetryUnsettled, summarizeKinds(res.Verification.Disagreements))
	}
}

// TestRunRefusedRetryIsAMismatch: a 4xx to the retry of an order that got
// its 201 contradicts it; a stale_fence too, though it settles nothing of
// an attempt still running: the service replays a placed order's key.
func TestRunRefusedRetryIsAMismatch(t *testing.T) {
	for _, code := range []string{"insufficient_stock", "stale_fence"} {
		t.Run(code, func(t *testing.T) {
			f := fakeservice.New("secret", false)
			u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
				if n == 2 {
					refuse(w, http.StatusConflict, code)
					return
				}
				next.ServeHTTP(w, r)
			})
			cfg := testConfig(u)
			cfg.Orders, cfg.Workload.RetryShare, cfg.Workload.Stock = 20, 1, 1000
			res, err := Execute(fakeservice.Context(t), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Safe || res.Orders.RetryMismatch != 20 || !strings.HasPrefix(res.Verdict, "UNSAFE: 0 units oversold, 0 lost, but 20 disagreements") {
				t.Fatalf("%s: mismatched %d", res.Verdict, res.Orders.RetryMismatch)
			}
		})
	}
}

// TestRunStaleFenceRetryLeavesOutcomeUnknown: the retry of an order whose
// first answer was lost may reach another instance while the first
// attempt still runs there, and be overtaken by it (409 stale_fence). That
// says nothing of the first attempt, which committed: reconcile must ask
// again and book it, or the verification finds its units unaccounted for.
func TestRunStaleFenceRetryLeavesOutcomeUnknown(t *testing.T) {
	f := fakeservice.New("secret", false)
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		switch n {
		case 1:
			lostAck(w, r, next)
		case 2:
			refuse(w, http.StatusConflict, "stale_fence")
		default:
			next.ServeHTTP(w, r)
		}
	})
	cfg := testConfig(u)
	cfg.Orders, cfg.Workload.RetryShare, cfg.Workload.Stock = 40, 1, 1000
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Safe || res.Orders.Reconciled != 40 || res.Verification.Sources.Ledger.Orders != 40 {
		t.Fatalf("%s: reconciled %d, receipts %d orders; %v", res.Verdict, res.Orders.Reconciled,
			res.Verification.Sources.Ledger.Orders, summarizeKinds(res.Verification.Disagreements))
	}
}

// TestRunShedRetryLeavesOutcomeUnknown: an order whose first answer was
// unknown and whose retry was shed is still unknown, so reconcile asks
// again and finds its 201; booked as refused, its units would be missing
// from the receipts.
func TestRunShedRetryLeavesOutcomeUnknown(t *testing.T) {
	f := fakeservice.New("secret", false)
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		switch n {
		case 1:
			lostAck(w, r, next)
		case 2:
			refuse(w, http.StatusServiceUnavailable, "overloaded")
		default:
			next.ServeHTTP(w, r)
		}
	})
	cfg := testConfig(u)
	cfg.Orders, cfg.Workload.RetryShare, cfg.Workload.Stock = 40, 1, 1000
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Safe || res.Orders.Reconciled != 40 || res.Verification.Sources.Ledger.Orders != 40 {
		t.Fatalf("%s: reconciled %d, receipts %d orders; %v", res.Verdict, res.Orders.Reconciled,
			res.Verification.Sources.Ledger.Orders, summarizeKinds(res.Verification.Disagreements))
	}
}

// TestRunReconcileWaitsOutKeyInFlight: an instance may keep a key in flight
// for its lock wait and store timeout; reconcile keeps asking, backing
// off, until the key's order answers.
func TestRunReconcileWaitsOutKeyInFlight(t *testing.T) {
	f := fakeservice.New("secret", false)
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		switch {
		case n == 1:
			lostAck(w, r, next)
		case n <= 5:
			refuse(w, http.StatusConflict, "idempotency_key_in_flight")
		default:
			next.ServeHTTP(w, r)
		}
	})
	cfg := testConfig(u)
	cfg.Orders, cfg.Concurrency, cfg.Workload.RetryShare, cfg.Workload.Stock = 16, 16, 0, 1000
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Safe || res.Orders.Reconciled != 16 || res.Orders.Unresolved != 0 {
		t.Fatalf("%s: reconciled %d, unresolved %d", res.Verdict, res.Orders.Reconciled, res.Orders.Unresolved)
	}
}

// TestRunUnresolvedIsInconclusive: orders whose outcome never became known
// make the run inconclusive, neither safe nor damaged.
func TestRunUnresolvedIsInconclusive(t *testing.T) {
	defer func(d time.Duration) { reconcileWait = d }(reconcileWait)
	reconcileWait = 300 * time.Millisecond
	f := fakeservice.New("secret", false)
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		refuse(w, http.StatusServiceUnavailable, "store_unavailable")
	})
	cfg := testConfig(u)
	cfg.Orders, cfg.Workload.RetryShare, cfg.RequestTimeout = 10, 0, 100*time.Millisecond
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Safe || res.Damaged() || res.Orders.Unresolved != 10 || res.Verification.Unresolved != 10 ||
		res.Verdict != "INCONCLUSIVE: 0 oversold, 0 lost, but 10 orders' outcome stayed unknown" {
		t.Fatalf("safe %v damaged %v unresolved %d: %s", res.Safe, res.Damaged(), res.Orders.Unresolved, res.Verdict)
	}
}

// TestRunFencingOff: unfenced, the store stamps no token on the rows, while
// the 201s carry the lease's; that is no finding. Fenced, it is one.
func TestRunFencingOff(t *testing.T) {
	f := fakeservice.New("secret", false)
	unstamped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/v1/skus/") || strings.HasSuffix(r.URL.Path, "/audit") {
			f.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		f.ServeHTTP(rec, r)
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Error(err)
		}
		body["fence_token"] = 0
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Code)
		_ = json.NewEncoder(w).Encode(body)
	})
	s := httptest.NewServer(unstamped)
	t.Cleanup(s.Close)
	for _, tc := range []struct {
		fencing string
		safe    bool
	}{{"off", true}, {"on", false}} {
		cfg := testConfig(s.URL)
		cfg.Fencing = tc.fencing
		res, err := Execute(fakeservice.Context(t), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Safe != tc.safe {
			t.Errorf("fencing %s: %s %v", tc.fencing, res.Verdict, summarizeKinds(res.Verification.Disagreements))
		}
	}
}

// TestRunInterrupted: a run whose context ends before it is verified, in
// any phase, returns what it measured, marked INTERRUPTED, with
// ErrInterrupted.
func TestRunInterrupted(t *testing.T) {
	for _, tc := range []struct {
		phase string
		at    func(r *http.Request) bool
	}{
		{"while creating the SKUs", func(r *http.Request) bool { return r.Method == http.MethodPut }},
		{"while sending", func(r *http.Request) bool { return r.Method == http.MethodPost }},
		{"while verifying", func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/audit") }},
	} {
		t.Run(tc.phase, func(t *testing.T) {
			ctx, cancel := context.WithCancel(fakeservice.Context(t))
			defer cancel()
			f := fakeservice.New("secret", false)
			var once sync.Once
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.at(r) {
					once.Do(cancel)
				}
				f.ServeHTTP(w, r)
			}))
			t.Cleanup(s.Close)
			res, err := Execute(ctx, testConfig(s.URL), nil)
			if !errors.Is(err, ErrInterrupted) || res == nil {
				t.Fatalf("err %v, result %v", err, res)
			}
			if res.Safe || res.Damaged() || !strings.HasPrefix(res.Verdict, "INTERRUPTED after ") || !strings.HasSuffix(res.Verdict, ", "+tc.phase+": not verified") {
				t.Errorf("safe %v damaged %v verdict %q", res.Safe, res.Damaged(), res.Verdict)
			}
		})
	}
}

// TestRunInterruptedWhileReconciling: Ctrl-C while unanswered orders are
// being resent.
func TestRunInterruptedWhileReconciling(t *testing.T) {
	ctx, cancel := context.WithCancel(fakeservice.Context(t))
	defer cancel()
	f := fakeservice.New("secret", false)
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		if n > 1 {
			cancel()
		}
		refuse(w, http.StatusServiceUnavailable, "store_unavailable")
	})
	cfg := testConfig(u)
	cfg.Orders, cfg.Workload.RetryShare = 10, 0
	res, err := Execute(ctx, cfg, nil)
	if !errors.Is(err, ErrInterrupted) || res == nil || !strings.HasSuffix(res.Verdict, "while reconciling unanswered orders: not verified") {
		t.Fatalf("err %v, result %+v", err, res)
	}
}

// TestRunRetryWithAnotherOrderIDIsOneFinding: a same-key retry answered
// 201 with another order id is one fault of the service, found once (the
// receipts' idempotency_violated), and the list of findings stays within
// its bound however many orders show it.
func TestRunRetryWithAnotherOrderIDIsOneFinding(t *testing.T) {
	f := fakeservice.New("secret", false)
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		if n != 2 {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Error(err)
		}
		if rec.Code == http.StatusCreated {
			body["order_id"] = uuid.NewString()
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Code)
		_ = json.NewEncoder(w).Encode(body)
	})
	cfg := testConfig(u)
	cfg.Orders, cfg.Workload.RetryShare, cfg.Workload.Stock = 250, 1, 100_000
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := res.Verification
	// Each retry's 201 is a second promise in the receipts, so the SKUs'
	// holdings fall short of them: findings of their own.
	perSKU := 0
	for _, c := range v.SKUs {
		perSKU += len(c.Disagreements)
	}
	if res.Orders.RetryMismatch != 250 || v.DisagreementCount != 250+perSKU || len(v.Disagreements) != maxListedDisagreements {
		t.Fatalf("mismatched %d, disagreement_count %d (want 250 + %d per SKU), %d listed (want %d)",
			res.Orders.RetryMismatch, v.DisagreementCount, perSKU, len(v.Disagreements), maxListedDisagreements)
	}
	for _, d := range v.Disagreements {
		if d.Kind != "idempotency_violated" {
			t.Fatalf("listed %s: %s", d.Kind, d.Detail)
		}
	}
}

// TestRunRetryFiguresAddUp: every deliberate retry is counted in exactly
// one of replayed, mismatched, unsettled and settled. A retry that settles
// an order whose first answer decided nothing is settled; one that places
// an order the service refused for want of stock is a mismatch, since a
// run's stock never grows.
func TestRunRetryFiguresAddUp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) bool
		counted func(tally.OrderCounts) int
		safe    bool
	}{
		{"lost, then placed", func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) bool {
			if n == 1 {
				lostAck(w, r, next)
			}
			return n == 1
		}, func(o tally.OrderCounts) int { return o.RetrySettled }, true},
		{"lock unavailable, then placed", func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) bool {
			if n == 1 {
				refuse(w, http.StatusServiceUnavailable, "lock_unavailable")
			}
			return n == 1
		}, func(o tally.OrderCounts) int { return o.RetrySettled }, true},
		{"lost, then overtaken", func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) bool {
			switch n {
			case 1:
				lostAck(w, r, next)
			case 2:
				refuse(w, http.StatusConflict, "stale_fence")
			}
			return n <= 2
		}, func(o tally.OrderCounts) int { return o.RetryUnsettled }, true},
		{"refused twice", func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) bool {
			if n <= 2 {
				refuse(w, http.StatusConflict, "insufficient_stock")
			}
			return n <= 2
		}, func(o tally.OrderCounts) int { return o.RetryReplayed }, true},
		{"refused, then placed", func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) bool {
			if n == 1 {
				refuse(w, http.StatusConflict, "insufficient_stock")
			}
			return n == 1
		}, func(o tally.OrderCounts) int { return o.RetryMismatch }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeservice.New("secret", false)
			u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
				if !tc.answer(n, w, r, next) {
					next.ServeHTTP(w, r)
				}
			})
			cfg := testConfig(u)
			cfg.Orders, cfg.Workload.RetryShare, cfg.Workload.Stock = 20, 1, 1000
			res, err := Execute(fakeservice.Context(t), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			o := res.Orders
			if o.Retries != 20 || tc.counted(o) != 20 || o.RetryReplayed+o.RetryMismatch+o.RetryUnsettled+o.RetrySettled != o.Retries {
				t.Fatalf("retries %d: replayed %d, mismatched %d, unsettled %d, settled %d", o.Retries, o.RetryReplayed, o.RetryMismatch, o.RetryUnsettled, o.RetrySettled)
			}
			if res.Safe != tc.safe {
				t.Fatalf("%s: %v", res.Verdict, summarizeKinds(res.Verification.Disagreements))
			}
			if tc.safe {
				return
			}
			v := res.Verification
			if v.DisagreementCount != 20 || !strings.HasPrefix(res.Verdict, "UNSAFE: 0 units oversold, 0 lost, but 20 disagreements") {
				t.Fatalf("%s: %v", res.Verdict, summarizeKinds(v.Disagreements))
			}
			for _, d := range v.Disagreements {
				if d.Kind != "retry_not_replayed" || !strings.Contains(d.Detail, "first answer insufficient_stock (HTTP 409), same-key retry 201 ") {
					t.Fatalf("%s: %s", d.Kind, d.Detail)
				}
			}
		})
	}
}

// TestRunUnresolvedCountedByLastAnswer: an order whose outcome stayed
// unknown counts among the errors by the code of its last answer, and
// stays unresolved whatever that answer, even one of a kind (stale_fence,
// 503 overloaded) that settles nothing.
func TestRunUnresolvedCountedByLastAnswer(t *testing.T) {
	defer func(d time.Duration) { reconcileWait = d }(reconcileWait)
	reconcileWait = 300 * time.Millisecond
	for _, last := range []struct {
		status int
		code   string
	}{
		{http.StatusConflict, "idempotency_key_in_flight"},
		{http.StatusConflict, "stale_fence"},
		{http.StatusServiceUnavailable, "overloaded"},
	} {
		t.Run(last.code, func(t *testing.T) {
			f := fakeservice.New("secret", false)
			u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
				if n == 1 {
					refuse(w, http.StatusServiceUnavailable, "store_unavailable")
					return
				}
				refuse(w, last.status, last.code)
			})
			cfg := testConfig(u)
			cfg.Orders, cfg.Workload.RetryShare, cfg.RequestTimeout = 10, 0, 100*time.Millisecond
			res, err := Execute(fakeservice.Context(t), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			o := res.Orders
			if o.Unresolved != 10 || o.Errors != 10 || o.ErrorCodes[last.code] != 10 || len(o.ErrorCodes) != 1 ||
				o.FirstAnswers.ErrorCodes["store_unavailable"] != 10 || res.Safe || res.Damaged() {
				t.Fatalf("unresolved %d, errors %d by code %v (first answers %v): %s",
					o.Unresolved, o.Errors, o.ErrorCodes, o.FirstAnswers.ErrorCodes, res.Verdict)
			}
		})
	}
}

// TestRunInterruptedAfterContradictionIsNotDamaged: a run stopped before
// its verification counts neither safe nor damaged, even when a same-key
// retry contradicted its first answer before the stop.
func TestRunInterruptedAfterContradictionIsNotDamaged(t *testing.T) {
	ctx, cancel := context.WithCancel(fakeservice.Context(t))
	defer cancel()
	f := fakeservice.New("secret", false)
	var firsts atomic.Int32
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		if n > 1 {
			next.ServeHTTP(w, r)
			return
		}
		// One client: the orders before this one are done, each refused
		// and then placed by its retry.
		if firsts.Add(1) == 4 {
			cancel()
		}
		refuse(w, http.StatusConflict, "insufficient_stock")
	})
	cfg := testConfig(u)
	cfg.Orders, cfg.Concurrency, cfg.Workload.RetryShare, cfg.Workload.Stock = 40, 1, 1, 1000
	res, err := Execute(ctx, cfg, nil)
	if !errors.Is(err, ErrInterrupted) || res == nil {
		t.Fatalf("err %v, result %v", err, res)
	}
	if res.Orders.RetryMismatch == 0 {
		t.Fatalf("no retry contradicted its first answer before the stop: %+v", res.Orders)
	}
	if res.Safe || res.Damaged() || res.Verification.Safe() || res.Verification.Damaged() {
		t.Errorf("safe %v damaged %v: %s", res.Safe, res.Damaged(), res.Verdict)
	}
}

// TestRunVerifiesThroughAnotherInstance: when the first instance stops
// answering before the verification, the run is verified through the
// next; when none answers, the error names each one and why.
func TestRunVerifiesThroughAnotherInstance(t *testing.T) {
	f := fakeservice.New("secret", false)
	dead := func() *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/skus/") {
				// Gone mid-run: the connection drops without an answer.
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			f.ServeHTTP(w, r)
		}))
		t.Cleanup(s.Close)
		return s
	}
	a, b := dead(), f.Server(t)
	var progressOut bytes.Buffer
	res, err := Execute(fakeservice.Context(t), testConfig(a.URL, b.URL), &progressOut)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Safe || res.VerifyFromURL != b.URL || !strings.Contains(progressOut.String(), a.URL+" did not answer the verification") {
		t.Fatalf("safe %v, verified through %s: %s; progress:\n%s", res.Safe, res.VerifyFromURL, res.Verdict, progressOut.String())
	}

	c := dead()
	_, err = Execute(fakeservice.Context(t), testConfig(a.URL, c.URL), nil)
	if err == nil || !strings.Contains(err.Error(), "through "+a.URL+": ") || !strings.Contains(err.Error(), "through "+c.URL+": ") {
		t.Fatalf("err = %v", err)
	}
}

// TestRunVerifyStopsBeforeTheHoldsCouldExpire: the verification goes
// through the next instance, after one that hung for --request-timeout,
// only while the holds leave it the reads' allowance, and reads nothing
// once they could have expired (their units back in stock and sold again:
// a safe service would look as if it had lost them). A run it cannot
// verify in time is an error, "not verified", never a verdict.
func TestRunVerifyStopsBeforeTheHoldsCouldExpire(t *testing.T) {
	ctx := fakeservice.Context(t)
	f := fakeservice.New("secret", false)
	// reads wraps f; its GETs of a SKU (audit, counters) wait delay first,
	// or, if delay is 0, until the client gives up.
	reads := func(delay time.Duration) (*httptest.Server, *atomic.Int32) {
		var n atomic.Int32
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/skus/") {
				n.Add(1)
				var wait <-chan time.Time // nil: until the client gives up
				if delay > 0 {
					wait = time.After(delay)
				}
				select {
				case <-wait:
				case <-r.Context().Done():
					return
				}
			}
			f.ServeHTTP(w, r)
		}))
		t.Cleanup(s.Close)
		return s, &n
	}
	newRunner := func(requestTimeout time.Duration, urls ...string) *runner {
		cfg := testConfig(urls...)
		cfg.RequestTimeout = requestTimeout
		r := &runner{cfg: cfg, client: client.New(8, cfg.AdminToken, cfg.RequestTimeout), runID: NewRunID(), rc: NewReceipts()}
		t.Cleanup(r.client.Close)
		if err := r.setup(ctx); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// holdsFrom is when the first order must have been placed for the
	// verification to have left before it must have read everything.
	holdsFrom := func(r *runner, left time.Duration) time.Time {
		return time.Now().Add(left + holdClockMargin - time.Duration(r.cfg.HoldSeconds)*time.Second)
	}
	const requestTimeout = 200 * time.Millisecond
	hung, _ := reads(0)
	live, liveReads := reads(time.Millisecond)

	r := newRunner(requestTimeout, hung.URL, live.URL)
	if _, _, err := r.verify(ctx, holdsFrom(r, verifyReads+requestTimeout/2), nil); err == nil ||
		!strings.HasPrefix(err.Error(), "not verified: the holds could expire in ") || !strings.Contains(err.Error(), "through "+hung.URL+": ") ||
		liveReads.Load() != 0 {
		t.Errorf("the hung instance leaves less than the reads' allowance: err %v, %d reads through the next", err, liveReads.Load())
	}
	v, from, err := r.verify(ctx, holdsFrom(r, verifyReads+10*requestTimeout), nil)
	if err != nil || from != live.URL || !v.Safe() {
		t.Errorf("the hung instance leaves the reads their allowance: verified through %s, safe %v, err %v", from, v.Safe(), err)
	}

	slow, _ := reads(time.Second)
	r = newRunner(5*time.Second, slow.URL)
	start := time.Now()
	if _, _, err := r.verify(ctx, holdsFrom(r, 300*time.Millisecond), nil); err == nil ||
		!strings.HasPrefix(err.Error(), "not verified: the holds could expire ") || time.Since(start) > 900*time.Millisecond {
		t.Errorf("reads answered after the holds could expire: err %v after %v", err, time.Since(start))
	}
}

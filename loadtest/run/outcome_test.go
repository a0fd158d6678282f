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
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/fakeservice"
)

// TestRunCommittedUnknownIsInconclusive: orders that committed but whose
// answer was lost for good (keys ending in 3: placed, then 503
// store_unavailable to every resend) leave the counters and the audit
// above the receipts by their units. That gap is within what the unknown
// outcomes allow: the run is inconclusive, not damaged.
func TestRunCommittedUnknownIsInconclusive(t *testing.T) {
	defer func(d time.Duration) { reconcileWait = d }(reconcileWait)
	reconcileWait = 300 * time.Millisecond
	f := fakeservice.New("secret", false)
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		switch {
		case !strings.HasSuffix(r.Header.Get("Idempotency-Key"), "3"):
			next.ServeHTTP(w, r)
		case n == 1:
			lostAck(w, r, next)
		default:
			refuse(w, http.StatusServiceUnavailable, "store_unavailable")
		}
	})
	cfg := testConfig(u)
	cfg.Orders, cfg.Workload.RetryShare, cfg.Workload.Stock, cfg.RequestTimeout = 40, 0, 1000, time.Second
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := res.Verification
	if res.Safe || res.Damaged() || res.Orders.Unresolved != 4 || v.Unresolved != 4 || v.Sources.Ledger.UnresolvedUnits == 0 ||
		res.Verdict != "INCONCLUSIVE: 0 oversold, 0 lost, but 4 orders' outcome stayed unknown" {
		t.Fatalf("safe %v damaged %v unresolved %d (%d units): %s %v", res.Safe, res.Damaged(), res.Orders.Unresolved,
			v.Sources.Ledger.UnresolvedUnits, res.Verdict, summarizeKinds(v.Disagreements))
	}
}

// TestRunReconcilesAfter5xx: a 500, 502 or 504 answered after the order
// committed leaves its outcome unknown; reconcile resends it with its key,
// finds its 201, and the run is safe with every order reserved.
func TestRunReconcilesAfter5xx(t *testing.T) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			f := fakeservice.New("secret", false)
			u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
				if n > 1 {
					next.ServeHTTP(w, r)
					return
				}
				next.ServeHTTP(httptest.NewRecorder(), r)
				if status == http.StatusInternalServerError {
					refuse(w, status, "internal")
					return
				}
				w.WriteHeader(status) // a proxy's, without the API's body
				_, _ = w.Write([]byte("<html>upstream failed</html>"))
			})
			cfg := testConfig(u)
			cfg.Orders, cfg.Workload.RetryShare, cfg.Workload.Stock = 30, 0, 1000
			res, err := Execute(fakeservice.Context(t), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			o := res.Orders
			if !res.Safe || o.Reconciled != 30 || o.Reserved != 30 || o.Errors != 0 {
				t.Fatalf("%s: reconciled %d, reserved %d, errors %d %v; %v", res.Verdict, o.Reconciled, o.Reserved, o.Errors, o.ErrorCodes,
					summarizeKinds(res.Verification.Disagreements))
			}
		})
	}
}

// TestRunCountsFinalOutcomes: the tallies count what became of each order,
// not its first answer: an order shed with 503 overloaded, then reserved
// by its deliberate retry, is reserved; the first answers stay visible
// apart, in the table and the JSON.
func TestRunCountsFinalOutcomes(t *testing.T) {
	f := fakeservice.New("secret", false)
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		if n == 1 {
			refuse(w, http.StatusServiceUnavailable, "overloaded")
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
	o := res.Orders
	if !res.Safe || o.Reserved != 20 || o.Errors != 0 || len(o.ErrorCodes) != 0 || res.ReservedPerS <= 0 {
		t.Fatalf("%s: reserved %d, errors %d %v, reserved/s %v", res.Verdict, o.Reserved, o.Errors, o.ErrorCodes, res.ReservedPerS)
	}
	if fa := o.FirstAnswers; fa == nil || fa.Reserved != 0 || fa.Errors != 20 || fa.ErrorCodes["overloaded"] != 20 {
		t.Fatalf("first answers %+v", fa)
	}
	var table bytes.Buffer
	res.PrintTable(&table)
	for _, want := range []string{"reserved 20  insufficient 0", "first answers", "overloaded=20"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Orders struct {
			Reserved     int `json:"reserved"`
			FirstAnswers struct {
				Errors int `json:"errors"`
			} `json:"first_answers"`
		} `json:"orders"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Orders.Reserved != 20 || m.Orders.FirstAnswers.Errors != 20 {
		t.Fatalf("json orders %+v (%v): %s", m.Orders, err, b)
	}
}

// TestRunReservedPerSCountsOnlyWhileSending: orders reconciliation found
// placed after sending ended are reserved, but not within the time the
// rate divides by: every first answer lost, no retries, reserved/s is 0.
func TestRunReservedPerSCountsOnlyWhileSending(t *testing.T) {
	f := fakeservice.New("secret", false)
	u := script(t, f, func(n int, w http.ResponseWriter, r *http.Request, next http.Handler) {
		if n == 1 {
			lostAck(w, r, next)
			return
		}
		next.ServeHTTP(w, r)
	})
	cfg := testConfig(u)
	cfg.Orders, cfg.Workload.RetryShare, cfg.Workload.Stock = 30, 0, 1000
	res, err := Execute(fakeservice.Context(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := res.Orders
	if !res.Safe || o.Reconciled != 30 || o.Reserved != 30 || res.ThroughputPerS <= 0 || res.ReservedPerS != 0 {
		t.Fatalf("%s: reconciled %d, reserved %d, %v orders/s, %v reserved/s", res.Verdict, o.Reconciled, o.Reserved, res.ThroughputPerS, res.ReservedPerS)
	}
}

// TestRunInterruptedShowsLedgerNotZeros: a run stopped before its
// verification reports the units its receipts hold, and says its oversold
// and lost units were not verified rather than 0, in the table and the JSON.
func TestRunInterruptedShowsLedgerNotZeros(t *testing.T) {
	ctx, cancel := context.WithCancel(fakeservice.Context(t))
	defer cancel()
	f := fakeservice.New("secret", false)
	var once sync.Once
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/audit") {
			once.Do(cancel)
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	res, err := Execute(ctx, testConfig(s.URL), nil)
	if !errors.Is(err, ErrInterrupted) || res == nil {
		t.Fatalf("err %v, result %v", err, res)
	}
	led := res.Verification.Sources.Ledger
	if led.Units == 0 || led.Orders == 0 || res.Units.Reserved != led.Units || !res.Units.Unverified || !res.Verification.Unverified {
		t.Fatalf("ledger %+v, units %+v", led, res.Units)
	}
	var table bytes.Buffer
	res.PrintTable(&table)
	if out := table.String(); !strings.Contains(out, "oversold not verified  lost not verified") || strings.Contains(out, "oversold 0  lost 0") {
		t.Errorf("table:\n%s", out)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Units, Verification map[string]any }
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for obj, fields := range map[string]map[string]any{"units": m.Units, "verification": m.Verification} {
		for _, k := range []string{"oversold", "lost"} {
			if v, ok := fields[k]; !ok || v != nil {
				t.Errorf("%s.%s = %v (present %v), want null", obj, k, v, ok)
			}
		}
	}
	if m.Units["reserved"] != float64(led.Units) {
		t.Errorf("units.reserved = %v, want %d", m.Units["reserved"], led.Units)
	}
}

// TestReceiptsRejectRepeatedSKU: a 201 that answers [A×1, A×1] to a request
// for [A×1, B×1] has as many lines, each matching some requested line, yet
// is not the order asked for.
func TestReceiptsRejectRepeatedSKU(t *testing.T) {
	req := client.OrderRequest{Lines: []client.OrderLine{{SKU: "A", Quantity: 1}, {SKU: "B", Quantity: 1}}}
	var resp client.OrderResponse
	if err := json.Unmarshal([]byte(`{"order_id":"o1","lines":[{"sku":"A","quantity":1},{"sku":"A","quantity":1}]}`), &resp); err != nil {
		t.Fatal(err)
	}
	l := NewReceipts()
	l.Record("k1", req, &resp)
	if p := l.Problems(); len(p) != 1 || p[0].Kind != "response_lines_differ" {
		t.Fatalf("problems %v, want response_lines_differ", p)
	}
}

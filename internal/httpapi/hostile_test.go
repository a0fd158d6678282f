package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/metrics"
)

// recorder is the service behind the handler in the hostile-input tests:
// it counts every call that gets through, and answers with place.
type recorder struct {
	calls atomic.Int32
	// arg is the SKU or order id of the last call that took one.
	arg   atomic.Pointer[string]
	place func(ctx context.Context, req inventory.PlaceRequest) (*inventory.Order, bool, error)
	// ready, when set, answers Ready.
	ready func(ctx context.Context) error
}

func (r *recorder) Place(ctx context.Context, req inventory.PlaceRequest) (*inventory.Order, bool, error) {
	r.calls.Add(1)
	if r.place != nil {
		return r.place(ctx, req)
	}
	return &inventory.Order{ID: uuid.New(), Status: inventory.StatusReserved}, false, nil
}

func (r *recorder) SetStock(_ context.Context, sku string, _ int64) (inventory.SKU, error) {
	r.calls.Add(1)
	r.arg.Store(&sku)
	return inventory.SKU{}, nil
}

func (r *recorder) SetStockIf(_ context.Context, sku string, _ int64, _ inventory.StockExpectation) (inventory.SKU, error) {
	r.calls.Add(1)
	r.arg.Store(&sku)
	return inventory.SKU{}, nil
}

func (r *recorder) SKU(_ context.Context, sku string) (inventory.SKU, error) {
	r.calls.Add(1)
	r.arg.Store(&sku)
	return inventory.SKU{}, nil
}

func (r *recorder) Audit(_ context.Context, sku string) (inventory.Audit, error) {
	r.calls.Add(1)
	r.arg.Store(&sku)
	return inventory.Audit{}, nil
}

func (r *recorder) Order(_ context.Context, id string) (*inventory.Order, error) {
	r.calls.Add(1)
	r.arg.Store(&id)
	return &inventory.Order{}, nil
}

func (r *recorder) Confirm(_ context.Context, id string) (*inventory.Order, error) {
	r.calls.Add(1)
	r.arg.Store(&id)
	return &inventory.Order{}, nil
}

func (r *recorder) Cancel(_ context.Context, id string) (*inventory.Order, error) {
	r.calls.Add(1)
	r.arg.Store(&id)
	return &inventory.Order{}, nil
}

func (r *recorder) Ready(ctx context.Context) error {
	if r.ready != nil {
		return r.ready(ctx)
	}
	return nil
}

// hostileReq is a request as a hostile client may send it, written
// straight to the handler, so nothing a real client library would refuse
// to send (control bytes in a header) is filtered on the way.
type hostileReq struct {
	method, path, body string
	header             http.Header
}

func (q hostileReq) serve(h http.Handler) *httptest.ResponseRecorder {
	req := httptest.NewRequest(q.method, q.path, strings.NewReader(q.body))
	if q.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range q.header {
		req.Header[k] = vs
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func errorCode(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("answer %d is not the API's JSON error: %q", w.Code, w.Body.String())
	}
	return body.Error.Code
}

const oneLine = `{"lines":[{"sku":"a","quantity":1}]}`

func key(v ...string) http.Header { return http.Header{"Idempotency-Key": v} }

// TestHostileInputNeverReachesTheService sends each class of input a
// client controls and should not get past the edge: each answers its
// status and code, and the service (so no lock and no row) is never called.
func TestHostileInputNeverReachesTheService(t *testing.T) {
	cases := []struct {
		name   string
		req    hostileReq
		status int
		code   string
	}{
		{"key not UTF-8", hostileReq{"POST", "/v1/orders", oneLine, key("k\xff\xfe")}, 400, "invalid_request"},
		{"key with a control byte", hostileReq{"POST", "/v1/orders", oneLine, key("k\x01")}, 400, "invalid_request"},
		{"key with a newline", hostileReq{"POST", "/v1/orders", oneLine, key("k\nX-Admin: 1")}, 400, "invalid_request"},
		{"key with DEL", hostileReq{"POST", "/v1/orders", oneLine, key("k\x7f")}, 400, "invalid_request"},
		{"key empty", hostileReq{"POST", "/v1/orders", oneLine, key("")}, 400, "invalid_request"},
		{"key too long", hostileReq{"POST", "/v1/orders", oneLine, key(strings.Repeat("k", inventory.MaxIdempotency+1))}, 400, "invalid_request"},
		{"key sent twice", hostileReq{"POST", "/v1/orders", oneLine, key("a", "b")}, 400, "invalid_request"},
		{"body too large", hostileReq{"POST", "/v1/orders", `{"lines":[],"x":"` + strings.Repeat("x", 64<<10) + `"}`, nil}, 413, "body_too_large"},
		{"body not JSON media type", hostileReq{"POST", "/v1/orders", oneLine, http.Header{"Content-Type": {"text/plain"}}}, 415, "unsupported_media_type"},
		{"body content-coded", hostileReq{"POST", "/v1/orders", oneLine, http.Header{"Content-Encoding": {"gzip"}}}, 415, "unsupported_media_type"},
		{"PUT body content-coded", hostileReq{"PUT", "/v1/skus/a", `{"available":1}`, http.Header{"Content-Encoding": {"identity, br"}}}, 415, "unsupported_media_type"},
		{"body nested 10,000 deep", hostileReq{"POST", "/v1/orders", `{"lines":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, nil}, 400, "invalid_request"},
		{"quantity a float", hostileReq{"POST", "/v1/orders", `{"lines":[{"sku":"a","quantity":1.0}]}`, nil}, 400, "invalid_request"},
		{"quantity a string", hostileReq{"POST", "/v1/orders", `{"lines":[{"sku":"a","quantity":"1"}]}`, nil}, 400, "invalid_request"},
		{"quantity huge", hostileReq{"POST", "/v1/orders", `{"lines":[{"sku":"a","quantity":1e300}]}`, nil}, 400, "invalid_request"},
		{"sku a path", hostileReq{"POST", "/v1/orders", `{"lines":[{"sku":"../../zk","quantity":1}]}`, nil}, 400, "invalid_request"},
		{"sku path with NUL", hostileReq{"GET", "/v1/skus/a%00b", "", nil}, 400, "invalid_request"},
		{"sku path not UTF-8", hostileReq{"GET", "/v1/skus/a%FF/audit", "", nil}, 400, "invalid_request"},
		{"sku path too long", hostileReq{"GET", "/v1/skus/" + strings.Repeat("s", 65), "", nil}, 400, "invalid_request"},
		{"sku path with braces", hostileReq{"PUT", "/v1/skus/%7Bx%7D", `{"available":1}`, nil}, 400, "invalid_request"},
		{"order id not a uuid", hostileReq{"GET", "/v1/orders/'%20OR%201=1", "", nil}, 404, "unknown_order"},
		{"order id not a uuid, confirm", hostileReq{"POST", "/v1/orders/x%FF/confirm", "", nil}, 404, "unknown_order"},
		{"order id not a uuid, cancel", hostileReq{"POST", "/v1/orders/" + strings.Repeat("9", 1000) + "/cancel", "", nil}, 404, "unknown_order"},
		{"made-up method on a route", hostileReq{"BREW", "/v1/orders", oneLine, nil}, 405, "method_not_allowed"},
		{"made-up method elsewhere", hostileReq{"BREW", "/coffee", "", nil}, 404, "not_found"},
		{"DELETE a SKU", hostileReq{"DELETE", "/v1/skus/a", "", nil}, 405, "method_not_allowed"},
	}
	svc := &recorder{}
	h := httpapi.New(httpapi.Config{Service: svc})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := svc.calls.Load()
			w := c.req.serve(h)
			if got := errorCode(t, w); w.Code != c.status || got != c.code {
				t.Fatalf("%s %q = %d %q, want %d %q: %s", c.req.method, c.req.path, w.Code, got, c.status, c.code, w.Body)
			}
			if n := svc.calls.Load() - before; n != 0 {
				t.Fatalf("%d call(s) reached the service", n)
			}
		})
	}

	// A long unknown key is refused without being echoed whole.
	w := hostileReq{"POST", "/v1/orders", `{"` + strings.Repeat("k", 60<<10) + `":1}`, nil}.serve(h)
	if got := errorCode(t, w); w.Code != http.StatusBadRequest || got != "invalid_request" || w.Body.Len() > 1024 {
		t.Errorf("60 KB unknown key = %d %q, %d bytes; want 400 invalid_request under 1 KB", w.Code, got, w.Body.Len())
	}

	// A number of 60,000 digits is refused naming the field, not echoed
	// whole, and without our Go type names.
	w = hostileReq{"POST", "/v1/orders", `{"lines":[{"sku":"a","quantity":1` + strings.Repeat("0", 60_000) + `}]}`, nil}.serve(h)
	if got := errorCode(t, w); w.Code != http.StatusBadRequest || got != "invalid_request" || w.Body.Len() > 1024 ||
		!strings.Contains(w.Body.String(), "quantity") || strings.Contains(w.Body.String(), "Request") {
		t.Errorf("60,000-digit quantity = %d %q, %d bytes: %.300s; want 400 invalid_request under 1 KB naming the field",
			w.Code, got, w.Body.Len(), w.Body)
	}

	// The edges of the key rule are accepted: printable ASCII of 1 and 255
	// bytes, spaces inside (not at either end, which HTTP drops).
	for _, k := range []string{"~", "!" + strings.Repeat(" !~", inventory.MaxIdempotency/3-1) + "~~"} {
		w := hostileReq{"POST", "/v1/orders", oneLine, key(k)}.serve(h)
		if w.Code != http.StatusCreated {
			t.Errorf("key of %d printable bytes = %d %s, want 201", len(k), w.Code, w.Body)
		}
	}
}

// TestEscapedSlashStaysInItsSegment: a path is routed as sent, so a %2F in
// a SKU or an order id is part of that name, never a separator that leads
// to another route (GET /v1/skus/a%2Faudit once answered a's audit).
// Escapes of other characters in a SKU or an id stand for those characters;
// the fixed segments are matched as sent, unescaped only in parameters.
func TestEscapedSlashStaysInItsSegment(t *testing.T) {
	const id = "0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e10"
	refused := []struct {
		req    hostileReq
		status int
		code   string
	}{
		{hostileReq{"GET", "/v1/skus/a%2Faudit", "", nil}, 400, "invalid_request"},
		{hostileReq{"GET", "/v1/skus/a%2fb", "", nil}, 400, "invalid_request"},
		{hostileReq{"PUT", "/v1/skus/a%2Faudit", `{"available":1}`, nil}, 400, "invalid_request"},
		{hostileReq{"GET", "/v1/skus/a%2Fb/audit", "", nil}, 400, "invalid_request"},
		{hostileReq{"GET", "/v1/orders/" + id + "%2Fconfirm", "", nil}, 404, "unknown_order"},
		// GET is the only method of /v1/orders/{id}, whatever the id.
		{hostileReq{"POST", "/v1/orders/" + id + "%2Fconfirm", "", nil}, 405, "method_not_allowed"},
		{hostileReq{"GET", "/v1/skus%2Fa", "", nil}, 404, "not_found"},
		{hostileReq{"GET", "/v1/%73kus/a", "", nil}, 404, "not_found"},
		{hostileReq{"GET", "/v1/skus/a/", "", nil}, 404, "not_found"},
		{hostileReq{"GET", "/v1/orders/", "", nil}, 404, "not_found"},
	}
	svc := &recorder{}
	h := httpapi.New(httpapi.Config{Service: svc})
	for _, c := range refused {
		before := svc.calls.Load()
		w := c.req.serve(h)
		if got := errorCode(t, w); w.Code != c.status || got != c.code {
			t.Errorf("%s %s = %d %q, want %d %q: %s", c.req.method, c.req.path, w.Code, got, c.status, c.code, w.Body)
		}
		if n := svc.calls.Load() - before; n != 0 {
			t.Errorf("%s %s: %d call(s) reached the service", c.req.method, c.req.path, n)
		}
	}

	routed := []struct {
		req    hostileReq
		status int
		arg    string // the SKU or order id the service was called with
	}{
		{hostileReq{"GET", "/v1/skus/widget%2D1", "", nil}, 200, "widget-1"},
		{hostileReq{"GET", "/v1/skus/gadget%3Ablue/audit", "", nil}, 200, "gadget:blue"},
		{hostileReq{"PUT", "/v1/skus/%77idget", `{"available":1}`, nil}, 200, "widget"},
		{hostileReq{"GET", "/v1/orders/" + strings.Replace(id, "-", "%2D", 1), "", nil}, 200, id},
		{hostileReq{"POST", "/v1/orders/" + id + "/confirm", "", nil}, 200, id},
		{hostileReq{"POST", "/v1/orders/" + id + "/cancel", "", nil}, 200, id},
		{hostileReq{"GET", "/v1/skus/a%2Db%5Fc%2E1", "", nil}, 200, "a-b_c.1"},
	}
	for _, c := range routed {
		svc.arg.Store(nil)
		w := c.req.serve(h)
		if w.Code != c.status {
			t.Errorf("%s %s = %d, want %d: %s", c.req.method, c.req.path, w.Code, c.status, w.Body)
			continue
		}
		if got := svc.arg.Load(); got == nil || *got != c.arg {
			t.Errorf("%s %s reached the service with %v, want %q", c.req.method, c.req.path, got, c.arg)
		}
	}
}

// A request id a client sends is echoed only when it is printable ASCII.
func TestRequestIDIsSanitised(t *testing.T) {
	h := httpapi.New(httpapi.Config{Service: &recorder{}})
	for id, echoed := range map[string]bool{"abc-123": true, "a\x01b": false, "a\xffb": false, strings.Repeat("i", 129): false} {
		w := hostileReq{"GET", "/healthz", "", http.Header{"X-Request-Id": {id}}}.serve(h)
		if got := w.Header().Get("X-Request-Id"); (got == id) != echoed || got == "" {
			t.Errorf("X-Request-Id %q answered as %q, echoed want %v", id, got, echoed)
		}
	}
}

// Made-up methods do not grow /metrics: every method outside HTTP's own is
// counted under one label value.
func TestMetricsLabelsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := httpapi.New(httpapi.Config{Service: &recorder{}, Metrics: metrics.New(reg, "test"), Gatherer: reg})
	series := func() int {
		w := hostileReq{"GET", "/metrics", "", nil}.serve(h)
		return strings.Count(w.Body.String(), "\nstockguard_http_")
	}
	for i := range 3 { // every series that a made-up method can reach exists after the first few
		hostileReq{fmt.Sprintf("M%d", i), "/v1/orders", "", nil}.serve(h)
		hostileReq{fmt.Sprintf("M%d", i), "/nowhere", "", nil}.serve(h)
	}
	series() // the scrape itself is a series from the second one on
	before := series()
	for i := range 500 {
		hostileReq{fmt.Sprintf("X%d", i), "/v1/orders", "", nil}.serve(h)
		hostileReq{fmt.Sprintf("Y%d", i), fmt.Sprintf("/p%d", i), "", nil}.serve(h)
	}
	if after := series(); after != before {
		t.Fatalf("1,000 requests with made-up methods and paths grew the HTTP series from %d to %d lines", before, after)
	}
	if w := (hostileReq{"GET", "/metrics", "", nil}).serve(h); !strings.Contains(w.Body.String(), `method="other",route="unmatched"`) {
		t.Fatalf("made-up methods are not counted as other:\n%s", w.Body)
	}
}

// Beyond MaxInFlight a request answers 503 overloaded at once, with
// Retry-After, without reaching the service; probes still answer.
func TestInFlightBound(t *testing.T) {
	const max = 3
	release := make(chan struct{})
	var entered sync.WaitGroup
	entered.Add(max)
	var n atomic.Int32
	svc := &recorder{place: func(ctx context.Context, _ inventory.PlaceRequest) (*inventory.Order, bool, error) {
		if n.Add(1) <= max {
			entered.Done()
			<-release
		}
		return &inventory.Order{ID: uuid.New()}, false, nil
	}}
	h := httpapi.New(httpapi.Config{Service: svc, MaxInFlight: max})
	var wg sync.WaitGroup
	for range max {
		wg.Go(func() {
			if w := (hostileReq{"POST", "/v1/orders", oneLine, nil}).serve(h); w.Code != http.StatusCreated {
				t.Errorf("request within the bound = %d %s", w.Code, w.Body)
			}
		})
	}
	entered.Wait()
	w := hostileReq{"POST", "/v1/orders", oneLine, nil}.serve(h)
	if code := errorCode(t, w); w.Code != http.StatusServiceUnavailable || code != "overloaded" || w.Header().Get("Retry-After") == "" {
		t.Errorf("request over the bound = %d %q, Retry-After %q", w.Code, code, w.Header().Get("Retry-After"))
	}
	if n := svc.calls.Load(); n != max {
		t.Errorf("%d calls reached the service, want %d", n, max)
	}
	if w := (hostileReq{"GET", "/healthz", "", nil}).serve(h); w.Code != http.StatusOK {
		t.Errorf("healthz while overloaded = %d", w.Code)
	}
	close(release)
	wg.Wait()
	if w := (hostileReq{"POST", "/v1/orders", oneLine, nil}).serve(h); w.Code != http.StatusCreated {
		t.Errorf("request after the load went = %d %s", w.Code, w.Body)
	}
}

// A request that runs out of RequestTimeout answers 503 timeout (not 499:
// the client is still there) before the server's write deadline.
func TestRequestTimeout(t *testing.T) {
	svc := &recorder{place: func(ctx context.Context, _ inventory.PlaceRequest) (*inventory.Order, bool, error) {
		<-ctx.Done()
		return nil, false, fmt.Errorf("waiting for locks: %w", ctx.Err())
	}}
	h := httpapi.New(httpapi.Config{Service: svc, RequestTimeout: 50 * time.Millisecond})
	start := time.Now()
	w := hostileReq{"POST", "/v1/orders", oneLine, nil}.serve(h)
	if code := errorCode(t, w); w.Code != http.StatusServiceUnavailable || code != "timeout" {
		t.Fatalf("a request past its deadline = %d %q", w.Code, code)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("answered after %s", d)
	}
}

// A database fault answers 503 store_unavailable with Retry-After, and its
// cause (server names, users) stays in the log.
func TestStoreUnavailable(t *testing.T) {
	svc := &recorder{place: func(context.Context, inventory.PlaceRequest) (*inventory.Order, bool, error) {
		return nil, false, fmt.Errorf("postgres: claim: %w: failed to connect to `user=secret database=prod`", inventory.ErrStoreUnavailable)
	}}
	w := hostileReq{"POST", "/v1/orders", oneLine, nil}.serve(httpapi.New(httpapi.Config{Service: svc}))
	if code := errorCode(t, w); w.Code != http.StatusServiceUnavailable || code != "store_unavailable" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("database fault = %d %q, Retry-After %q", w.Code, code, w.Header().Get("Retry-After"))
	}
	if strings.Contains(w.Body.String(), "secret") {
		t.Fatalf("the answer leaks the cause: %s", w.Body)
	}
}

// TestPanicIsCountedAndAnswered: a handler that panics answers 500 in the
// API's error shape and is counted like any other request, so an alert on
// the 5xx rate sees the bugs too.
func TestPanicIsCountedAndAnswered(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc := &recorder{place: func(context.Context, inventory.PlaceRequest) (*inventory.Order, bool, error) {
		panic("a bug")
	}}
	h := httpapi.New(httpapi.Config{Service: svc, Metrics: metrics.New(reg, "test"), Gatherer: reg})
	w := hostileReq{"POST", "/v1/orders", oneLine, nil}.serve(h)
	if w.Code != http.StatusInternalServerError || errorCode(t, w) == "" {
		t.Fatalf("panicking handler = %d %s, want 500 with the API's error body", w.Code, w.Body)
	}
	m := hostileReq{"GET", "/metrics", "", nil}.serve(h)
	if !strings.Contains(m.Body.String(), `stockguard_http_requests_total{method="POST",route="/v1/orders",status="500"} 1`) {
		t.Fatalf("the panicked request is not counted:\n%s", grep(m.Body.String(), "stockguard_http_requests_total"))
	}
}

// TestOrdersTotalCountsEveryOutcome: stockguard_orders_total counts each
// order once, under the code it was answered with, those refused before
// the handler (media type, body size, in-flight bound, a panic) and those
// whose client went away included.
func TestOrdersTotalCountsEveryOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	release, entered := make(chan struct{}), make(chan struct{})
	svc := &recorder{place: func(ctx context.Context, req inventory.PlaceRequest) (*inventory.Order, bool, error) {
		switch req.Lines[0].SKU {
		case "hold":
			close(entered)
			<-release
		case "replay":
			return &inventory.Order{ID: uuid.New()}, true, nil
		case "short":
			return nil, false, fmt.Errorf("place: %w", inventory.ErrInsufficientStock)
		case "gone":
			<-ctx.Done()
			return nil, false, fmt.Errorf("waiting for locks: %w", ctx.Err())
		case "bug":
			panic("a bug")
		}
		return &inventory.Order{ID: uuid.New()}, false, nil
	}}
	h := httpapi.New(httpapi.Config{Service: svc, Metrics: metrics.New(reg, "test"), Gatherer: reg, MaxInFlight: 1})
	order := func(sku string) string { return `{"lines":[{"sku":"` + sku + `","quantity":1}]}` }

	var wg sync.WaitGroup
	wg.Go(func() { hostileReq{"POST", "/v1/orders", order("hold"), nil}.serve(h) }) // created, once released
	<-entered
	overloaded := hostileReq{"POST", "/v1/orders", oneLine, nil}.serve(h)
	close(release)
	wg.Wait()
	if code := errorCode(t, overloaded); code != "overloaded" {
		t.Fatalf("order over the in-flight bound: %d %q", overloaded.Code, code)
	}
	hostileReq{"POST", "/v1/orders", order("replay"), nil}.serve(h)
	hostileReq{"POST", "/v1/orders", order("short"), nil}.serve(h)
	hostileReq{"POST", "/v1/orders", order("bug"), nil}.serve(h)
	hostileReq{"POST", "/v1/orders", oneLine, http.Header{"Content-Type": {"text/plain"}}}.serve(h)
	big := `{"lines":[{"sku":"a","quantity":1}],"x":"` + strings.Repeat("x", 70<<10) + `"}`
	hostileReq{"POST", "/v1/orders", big, nil}.serve(h)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, "POST", "/v1/orders", strings.NewReader(order("gone")))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(httptest.NewRecorder(), req)

	counts := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "stockguard_orders_total" {
			for _, m := range mf.GetMetric() {
				counts[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	for _, code := range []string{"created", "overloaded", "replayed", "insufficient_stock", "internal",
		"unsupported_media_type", "body_too_large", "client_closed_request"} {
		if n, ok := counts[code]; n != 1 {
			t.Errorf(`one order answered %s: stockguard_orders_total{code=%q} = %v (series exists: %v), want 1`, code, code, n, ok)
		}
		delete(counts, code)
	}
	for code, n := range counts {
		if n != 0 {
			t.Errorf(`stockguard_orders_total{code=%q} = %v, want 0`, code, n)
		}
	}
}

// TestReadyzHidesTheCause: /readyz answers anyone, so a database that is
// down is "not ready: database" there, and the driver's words (user, host,
// port) go to the log only.
func TestReadyzHidesTheCause(t *testing.T) {
	const cause = "failed to connect to `user=stock_admin host=10.1.2.3 port=5433`"
	svc := &recorder{ready: func(context.Context) error { return fmt.Errorf("store: postgres: ping: %s", cause) }}
	var log bytes.Buffer
	h := httpapi.New(httpapi.Config{Service: svc, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	w := hostileReq{"GET", "/readyz", "", nil}.serve(h)
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusServiceUnavailable ||
		body.Error.Code != "not_ready" || body.Error.Message != "not ready: database" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("readyz with the database down = %d %s, want 503 not_ready \"not ready: database\" with Retry-After", w.Code, w.Body)
	}
	if !strings.Contains(log.String(), "stock_admin") {
		t.Fatalf("the cause is not in the log:\n%s", log.String())
	}
}

// TestReadyzWithASlowDatabase: a database that does not answer (an
// exhausted pool, a partition) makes /readyz answer 503 not_ready within
// its bound, not hang as long as the probe's client waits.
func TestReadyzWithASlowDatabase(t *testing.T) {
	svc := &recorder{ready: func(ctx context.Context) error {
		<-ctx.Done() // answers only when given up on
		return fmt.Errorf("postgres: ping: %w", ctx.Err())
	}}
	start := time.Now()
	w := hostileReq{"GET", "/readyz", "", nil}.serve(httpapi.New(httpapi.Config{Service: svc}))
	if code := errorCode(t, w); w.Code != http.StatusServiceUnavailable || code != "not_ready" {
		t.Fatalf("readyz with the database hung = %d %q: %s", w.Code, code, w.Body)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("readyz with the database hung took %v, want its 2 s bound", d)
	}
}

// Clients that trickle their bodies hold their connections, not the
// in-flight slots: with every slot's worth of them sending, a whole order
// still gets through; and a body cut off by the server's read timeout is
// answered 400 with a message that names no socket.
func TestSlowBodiesTakeNoSlot(t *testing.T) {
	const max = 2
	svc := &recorder{place: func(context.Context, inventory.PlaceRequest) (*inventory.Order, bool, error) {
		return &inventory.Order{ID: uuid.New()}, false, nil
	}}
	srv := httptest.NewUnstartedServer(httpapi.New(httpapi.Config{Service: svc, MaxInFlight: max}))
	srv.Config.ReadTimeout = time.Second
	srv.Start()
	t.Cleanup(srv.Close)
	head := "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{"
	answers := make(chan string, max+1)
	for range max + 1 {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		go func() {
			b, _ := io.ReadAll(c)
			answers <- string(b)
		}()
	}
	time.Sleep(100 * time.Millisecond) // every slow request is in
	req, _ := http.NewRequest("POST", srv.URL+"/v1/orders", strings.NewReader(oneLine))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-1")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("an order while %d clients trickle their bodies = %d %s; want 201", max+1, resp.StatusCode, b)
	}
	for range max + 1 {
		a := <-answers
		if !strings.HasPrefix(a, "HTTP/1.1 400") || !strings.Contains(a, "request body not received within the server's read timeout") ||
			strings.Contains(a, "127.0.0.1") || strings.Contains(a, "cancelled by the client") {
			t.Fatalf("answer to a body cut off by the read timeout:\n%s", a)
		}
	}
}

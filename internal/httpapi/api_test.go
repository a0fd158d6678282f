package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/memlock"
	"github.com/stockguard/stockguard/internal/metrics"
	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/reservation"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

const adminToken = "s3cret"

// tokenLocker is the local lock with fencing tokens the test chooses, so a
// test can play a holder whose token is older than the row's.
type tokenLocker struct {
	*memlock.Locker
	next atomic.Uint64
}

func (l *tokenLocker) Fenced() bool { return true }

func (l *tokenLocker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	inner, err := l.Locker.Acquire(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	lease, _ := lock.NewLease(lock.LeaseParams{Key: key, Token: lock.Token(l.next.Add(1)), Handle: releaser{inner}})
	return lease, nil
}

// AcquireBatch takes each key through Acquire, so that a batch's leases get
// this locker's tokens too.
func (l *tokenLocker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return lock.EachOnce(ctx, l, keys, opts...)
}

type releaser struct{ l *lock.Lease }

func (r releaser) Release(ctx context.Context) error { return r.l.Release(ctx) }

type env struct {
	t      *testing.T
	url    string
	svc    *reservation.Service
	locker *tokenLocker
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvChaos(t, true)
}

// newEnvChaos is newEnv with --chaos on or off.
func newEnvChaos(t *testing.T, chaos bool) *env {
	t.Helper()
	ctx := context.Background()
	store, err := postgres.Open(ctx, stacktest.NewDatabase(t, ctx))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if _, err := postgres.Migrate(ctx, store.DB()); err != nil {
		t.Fatal(err)
	}
	lk := &tokenLocker{Locker: memlock.New()}
	lk.next.Store(100)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "test")
	svc := reservation.New(reservation.Config{Store: store, Locker: lk, Observer: m, LockWait: 300 * time.Millisecond})
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Service: svc, Metrics: m, Gatherer: reg,
		AdminToken: adminToken, Chaos: chaos}))
	t.Cleanup(srv.Close)
	return &env{t: t, url: srv.URL, svc: svc, locker: lk}
}

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (r response) code() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (e *env) do(method, path, body string, headers ...string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := response{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &r.body); err != nil && !strings.HasPrefix(path, "/metrics") {
		e.t.Fatalf("%s %s: body is not JSON: %q", method, path, raw)
	}
	return r
}

func (e *env) stock(sku string, n int) {
	e.t.Helper()
	r := e.do("PUT", "/v1/skus/"+sku, fmt.Sprintf(`{"available":%d}`, n), "Authorization", "Bearer "+adminToken)
	if r.status != 200 {
		e.t.Fatalf("PUT %s: %d %s", sku, r.status, r.raw)
	}
}

func (e *env) order(body string, headers ...string) response {
	return e.do("POST", "/v1/orders", body, headers...)
}

func (e *env) audit(sku string) inventory.Audit {
	e.t.Helper()
	r := e.do("GET", "/v1/skus/"+sku+"/audit", "")
	var a inventory.Audit
	b, _ := json.Marshal(r.body)
	_ = json.Unmarshal(b, &a)
	return a
}

func expect(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status || r.code() != code {
		t.Fatalf("got %d %q, want %d %q: %s", r.status, r.code(), status, code, r.raw)
	}
}

func TestSKULifecycle(t *testing.T) {
	e := newEnv(t)
	e.stock("apple", 10)
	r := e.do("GET", "/v1/skus/apple", "")
	if r.status != 200 || r.body["available"] != 10.0 || r.body["received"] != 10.0 || r.body["fence_token"] == 0.0 {
		t.Fatalf("GET sku = %d %s", r.status, r.raw)
	}
	e.stock("apple", 4) // received follows the change in available
	if a := e.audit("apple"); a.Received != 4 || !a.Consistent {
		t.Fatalf("audit after lowering stock = %+v", a)
	}
	expect(t, e.do("GET", "/v1/skus/pear", ""), 404, "unknown_sku")
	expect(t, e.do("GET", "/v1/skus/pear/audit", ""), 404, "unknown_sku")
	expect(t, e.do("PUT", "/v1/skus/apple", `{"available":1}`), 401, "unauthorized")
	expect(t, e.do("PUT", "/v1/skus/apple", `{"available":1}`, "Authorization", "Bearer nope"), 401, "unauthorized")
	expect(t, e.do("PUT", "/v1/skus/apple", `{"available":-1}`, "Authorization", "Bearer "+adminToken), 400, "invalid_request")
	expect(t, e.do("PUT", "/v1/skus/bad%20sku", `{"available":1}`, "Authorization", "Bearer "+adminToken), 400, "invalid_request")
	expect(t, e.do("GET", "/nowhere", ""), 404, "not_found")
	expect(t, e.do("DELETE", "/v1/skus/apple", ""), 405, "method_not_allowed")
	if r := e.do("GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("healthz = %d", r.status)
	}
	if r := e.do("GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("readyz = %d %s", r.status, r.raw)
	}
}

// TestStockPrecondition: with expect_available and expect_received, PUT
// sets the level only over those counters (a missing SKU has 0 of each),
// else answers 409 stock_changed naming the SKU and every counter that
// differs, and writes nothing; without them, or with null, PUT sets the
// level as ever.
func TestStockPrecondition(t *testing.T) {
	e := newEnv(t)
	admin := []string{"Authorization", "Bearer " + adminToken}
	put := func(sku, body string) response { return e.do("PUT", "/v1/skus/"+sku, body, admin...) }
	e.stock("a", 10)
	if r := e.order(`{"lines":[{"sku":"a","quantity":3}]}`); r.status != 201 {
		t.Fatalf("place = %d %s", r.status, r.raw)
	}
	r := put("a", `{"available":15,"expect_available":10}`)
	expect(t, r, 409, "stock_changed")
	detail := r.body["error"].(map[string]any)
	if detail["sku"] != "a" || !strings.Contains(detail["message"].(string), "available is 7, not the expected 10") {
		t.Fatalf("stock_changed without the SKU or the units available: %s", r.raw)
	}
	if a := e.audit("a"); a.Available != 7 || a.Held != 3 || a.Received != 10 || !a.Consistent {
		t.Fatalf("a refused precondition moved the counters: %+v", a)
	}
	if r := put("a", `{"available":12,"expect_available":7}`); r.status != 200 || r.body["available"] != 12.0 || r.body["received"] != 15.0 {
		t.Fatalf("PUT over the 7 available = %d %s, want 200 with available 12, received 15", r.status, r.raw)
	}
	// null is absent: the level is set whatever is there.
	if r := put("a", `{"available":9,"expect_available":null}`); r.status != 200 || r.body["available"] != 9.0 || r.body["received"] != 12.0 {
		t.Fatalf("PUT with a null expect_available = %d %s, want 200 with available 9", r.status, r.raw)
	}
	for _, c := range []struct{ body, message string }{
		{`{"available":20,"expect_available":10,"expect_received":10}`,
			`sku "a": stock changed: available is 9, not the expected 10; received is 12, not the expected 10`},
		{`{"available":20,"expect_available":9,"expect_received":10}`,
			`sku "a": stock changed: received is 12, not the expected 10`},
		{`{"available":20,"expect_received":10}`,
			`sku "a": stock changed: received is 12, not the expected 10`},
	} {
		r := put("a", c.body)
		expect(t, r, 409, "stock_changed")
		if detail := r.body["error"].(map[string]any); detail["sku"] != "a" || detail["message"] != c.message {
			t.Fatalf("PUT %s: %s, want the message %q", c.body, r.raw, c.message)
		}
	}
	if a := e.audit("a"); a.Available != 9 || a.Received != 12 || !a.Consistent {
		t.Fatalf("refused preconditions moved the counters: %+v", a)
	}
	if r := put("a", `{"available":20,"expect_available":9,"expect_received":12}`); r.status != 200 || r.body["received"] != 23.0 {
		t.Fatalf("PUT over the 9 available and 12 received = %d %s, want 200 with received 23", r.status, r.raw)
	}
	if r := put("a", `{"available":21,"expect_available":null,"expect_received":null}`); r.status != 200 || r.body["received"] != 24.0 {
		t.Fatalf("PUT with null expectations = %d %s, want 200 with received 24", r.status, r.raw)
	}

	r = put("b", `{"available":4,"expect_available":5}`)
	expect(t, r, 409, "stock_changed")
	if detail := r.body["error"].(map[string]any); detail["sku"] != "b" || !strings.Contains(detail["message"].(string), "available is 0") {
		t.Fatalf("stock_changed on a missing SKU: %s", r.raw)
	}
	expect(t, e.do("GET", "/v1/skus/b", ""), 404, "unknown_sku")
	if r := put("b", `{"available":4,"expect_available":0}`); r.status != 200 || r.body["available"] != 4.0 {
		t.Fatalf("PUT expecting 0 of a missing SKU = %d %s, want it created", r.status, r.raw)
	}
	expect(t, put("b", `{"available":4,"expect_available":0}`), 409, "stock_changed")

	expect(t, put("c", `{"available":4,"expect_available":0,"expect_received":5}`), 409, "stock_changed")
	expect(t, e.do("GET", "/v1/skus/c", ""), 404, "unknown_sku")
	if r := put("c", `{"available":4,"expect_available":0,"expect_received":0}`); r.status != 200 || r.body["received"] != 4.0 {
		t.Fatalf("PUT expecting 0 and 0 of a missing SKU = %d %s, want it created", r.status, r.raw)
	}
}

// TestStockPreconditionBadValues: expect_available and expect_received
// are decoded as available is, and must not be negative; a bad one is 400
// naming the field, and touches nothing.
func TestStockPreconditionBadValues(t *testing.T) {
	e := newEnv(t)
	e.stock("a", 5)
	for _, field := range []string{"expect_available", "expect_received"} {
		cases := []struct{ name, body string }{
			{"negative", `{"available":1,"FIELD":-1}`},
			{"overflowing", `{"available":1,"FIELD":99999999999999999999}`},
			{"float", `{"available":1,"FIELD":1.5}`},
			{"integral float", `{"available":1,"FIELD":5.0}`},
			{"exponent", `{"available":1,"FIELD":5e0}`},
			{"string", `{"available":1,"FIELD":"5"}`},
			{"boolean", `{"available":1,"FIELD":true}`},
			{"object", `{"available":1,"FIELD":{}}`},
			{"duplicate", `{"available":1,"FIELD":5,"FIELD":5}`},
			{"case-folded", `{"available":1,"` + strings.ToUpper(field[:1]) + field[1:] + `":5}`},
			{"no available", `{"FIELD":5}`},
		}
		for _, c := range cases {
			t.Run(field+"/"+c.name, func(t *testing.T) {
				r := e.do("PUT", "/v1/skus/a", strings.ReplaceAll(c.body, "FIELD", field), "Authorization", "Bearer "+adminToken)
				expect(t, r, 400, "invalid_request")
				msg := r.body["error"].(map[string]any)["message"].(string)
				if c.name != "no available" && !strings.Contains(strings.ToLower(msg), field) {
					t.Errorf("message %q does not name the field", msg)
				}
			})
		}
	}
	if a := e.audit("a"); a.Available != 5 || a.Received != 5 {
		t.Fatalf("bad requests changed stock: %+v", a)
	}
}

func TestOrderLifecycle(t *testing.T) {
	e := newEnv(t)
	e.stock("a", 5)
	e.stock("b", 5)
	r := e.order(`{"lines":[{"sku":"b","quantity":2},{"sku":"a","quantity":1}],"hold_seconds":60}`)
	if r.status != 201 || r.body["status"] != "reserved" {
		t.Fatalf("place = %d %s", r.status, r.raw)
	}
	lines := r.body["lines"].([]any)
	if lines[0].(map[string]any)["sku"] != "b" || lines[0].(map[string]any)["fence_token"] == 0.0 {
		t.Fatalf("lines not in request order or without token: %s", r.raw)
	}
	id := r.body["order_id"].(string)
	if g := e.do("GET", "/v1/orders/"+id, ""); g.status != 200 || g.body["order_id"] != id {
		t.Fatalf("GET order = %d %s", g.status, g.raw)
	}
	expect(t, e.order(`{"lines":[{"sku":"a","quantity":5},{"sku":"b","quantity":1}]}`), 409, "insufficient_stock")
	if a := e.audit("b"); a.Held != 2 || a.Available != 3 {
		t.Fatalf("a failed multi-line order touched b: %+v", a)
	}
	ins := e.order(`{"lines":[{"sku":"a","quantity":9}]}`)
	expect(t, ins, 409, "insufficient_stock")
	if ins.body["error"].(map[string]any)["sku"] != "a" {
		t.Fatalf("insufficient_stock without error.sku: %s", ins.raw)
	}
	expect(t, e.order(`{"lines":[{"sku":"zzz","quantity":1}]}`), 404, "unknown_sku")

	if c := e.do("POST", "/v1/orders/"+id+"/confirm", ""); c.status != 200 || c.body["status"] != "confirmed" {
		t.Fatalf("confirm = %d %s", c.status, c.raw)
	}
	if c := e.do("POST", "/v1/orders/"+id+"/confirm", ""); c.status != 200 {
		t.Fatalf("second confirm = %d %s, want 200", c.status, c.raw)
	}
	expect(t, e.do("POST", "/v1/orders/"+id+"/cancel", ""), 409, "invalid_transition")
	if a := e.audit("b"); a.Sold != 2 || a.Held != 0 || !a.Consistent {
		t.Fatalf("audit after confirm = %+v", a)
	}

	r2 := e.order(`{"lines":[{"sku":"a","quantity":2}]}`)
	id2 := r2.body["order_id"].(string)
	if c := e.do("POST", "/v1/orders/"+id2+"/cancel", ""); c.status != 200 || c.body["status"] != "cancelled" {
		t.Fatalf("cancel = %d %s", c.status, c.raw)
	}
	if c := e.do("POST", "/v1/orders/"+id2+"/cancel", ""); c.status != 200 {
		t.Fatalf("second cancel = %d", c.status)
	}
	expect(t, e.do("POST", "/v1/orders/"+id2+"/confirm", ""), 409, "invalid_transition")
	if a := e.audit("a"); a.Available != 4 || a.Held != 0 || a.Sold != 1 || !a.Consistent {
		t.Fatalf("audit after cancel = %+v", a)
	}
	expect(t, e.do("GET", "/v1/orders/not-a-uuid", ""), 404, "unknown_order")
	expect(t, e.do("GET", "/v1/orders/6f1c3f5e-2b7a-4f39-9d3e-1b7d2c1f0a11", ""), 404, "unknown_order")
	expect(t, e.do("POST", "/v1/orders/6f1c3f5e-2b7a-4f39-9d3e-1b7d2c1f0a11/confirm", ""), 404, "unknown_order")
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	e.stock("a", 5)
	cases := []struct{ name, body string }{
		{"empty object", `{}`},
		{"no lines", `{"lines":[]}`},
		{"null lines", `{"lines":null}`},
		{"unknown field", `{"lines":[{"sku":"a","quantity":1}],"coupon":"x"}`},
		{"unknown line field", `{"lines":[{"sku":"a","quantity":1,"price":3}]}`},
		{"case-folded key", `{"Lines":[{"sku":"a","quantity":1}]}`},
		{"case-folded line key", `{"lines":[{"SKU":"a","quantity":1}]}`},
		{"duplicate key", `{"lines":[{"sku":"a","quantity":1}],"lines":[{"sku":"a","quantity":2}]}`},
		{"trailing data", `{"lines":[{"sku":"a","quantity":1}]}{}`},
		{"float quantity", `{"lines":[{"sku":"a","quantity":1.5}]}`},
		{"exponent quantity", `{"lines":[{"sku":"a","quantity":1e3}]}`},
		{"string quantity", `{"lines":[{"sku":"a","quantity":"5"}]}`},
		{"null quantity", `{"lines":[{"sku":"a","quantity":null}]}`},
		{"missing quantity", `{"lines":[{"sku":"a"}]}`},
		{"zero quantity", `{"lines":[{"sku":"a","quantity":0}]}`},
		{"huge quantity", `{"lines":[{"sku":"a","quantity":1000001}]}`},
		{"overflowing quantity", `{"lines":[{"sku":"a","quantity":99999999999999999999}]}`},
		{"missing sku", `{"lines":[{"quantity":1}]}`},
		{"bad sku", `{"lines":[{"sku":"../etc","quantity":1}]}`},
		{"sku too long", `{"lines":[{"sku":"` + strings.Repeat("x", 65) + `","quantity":1}]}`},
		{"duplicate sku", `{"lines":[{"sku":"a","quantity":1},{"sku":"a","quantity":1}]}`},
		{"hold zero", `{"lines":[{"sku":"a","quantity":1}],"hold_seconds":0}`},
		{"hold too long", `{"lines":[{"sku":"a","quantity":1}],"hold_seconds":86401}`},
		{"lines not an array", `{"lines":{"sku":"a","quantity":1}}`},
		{"not an object", `[1,2]`},
		{"invalid utf-8", "{\"lines\":[{\"sku\":\"a\xff\",\"quantity\":1}]}"},
		{"not json", `lines=a`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { expect(t, e.order(c.body), 400, "invalid_request") })
	}
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf(`{"sku":"s%d","quantity":1}`, i)
	}
	expect(t, e.order(`{"lines":[`+strings.Join(many, ",")+`]}`), 400, "invalid_request")

	r := e.do("POST", "/v1/orders", `{"lines":[{"sku":"a","quantity":1}]}`, "Content-Type", "text/plain")
	expect(t, r, 415, "unsupported_media_type")
	big := `{"lines":[{"sku":"a","quantity":1}],"pad":"` + strings.Repeat("x", 70<<10) + `"}`
	expect(t, e.order(big), 413, "body_too_large")
	expect(t, e.order(`{"lines":[{"sku":"a","quantity":1}]}`, "X-Chaos-Pause", "soon"), 400, "invalid_request")
	expect(t, e.order(`{"lines":[{"sku":"a","quantity":1}]}`, "X-Chaos-Stall", "-1s"), 400, "invalid_request")
	expect(t, e.order(`{"lines":[{"sku":"a","quantity":1}]}`, "X-Chaos-Pause", "1ms", "X-Chaos-Stall", "1ms"), 400, "invalid_request")
	// Nothing above may have touched stock.
	if a := e.audit("a"); a.Available != 5 || a.Held != 0 {
		t.Fatalf("bad requests changed stock: %+v", a)
	}
}

func TestIdempotency(t *testing.T) {
	e := newEnv(t)
	e.stock("a", 100)
	body := `{"lines":[{"sku":"a","quantity":3}]}`
	first := e.order(body, "Idempotency-Key", "k-1")
	if first.status != 201 {
		t.Fatalf("first = %d %s", first.status, first.raw)
	}
	again := e.order(`{ "lines" : [ {"quantity":3, "sku":"a"} ] }`, "Idempotency-Key", "k-1")
	if again.status != 201 || again.body["order_id"] != first.body["order_id"] || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %d %s", again.status, again.raw)
	}
	expect(t, e.order(`{"lines":[{"sku":"a","quantity":4}]}`, "Idempotency-Key", "k-1"), 422, "idempotency_key_reused")
	// The replay is the first answer, even after the order moved on.
	if c := e.do("POST", "/v1/orders/"+first.body["order_id"].(string)+"/confirm", ""); c.status != 200 {
		t.Fatalf("confirm = %d %s", c.status, c.raw)
	}
	if r := e.order(body, "Idempotency-Key", "k-1"); r.status != 201 || r.body["status"] != "reserved" || r.raw != first.raw {
		t.Fatalf("replay after confirm = %d %s, want the first answer %s", r.status, r.raw, first.raw)
	}

	// A key whose first request is still running (paused in its critical
	// section) is in flight.
	done := make(chan response)
	go func() { done <- e.order(body, "Idempotency-Key", "k-2", "X-Chaos-Pause", "700ms") }()
	time.Sleep(250 * time.Millisecond)
	expect(t, e.order(body, "Idempotency-Key", "k-2"), 409, "idempotency_key_in_flight")
	if r := <-done; r.status != 201 {
		t.Fatalf("paused first request = %d %s", r.status, r.raw)
	}

	// A failed first attempt frees its key: the retry is judged afresh.
	expect(t, e.order(`{"lines":[{"sku":"a","quantity":1000}]}`, "Idempotency-Key", "k-3"), 409, "insufficient_stock")
	e.stock("a", 2000)
	if r := e.order(`{"lines":[{"sku":"a","quantity":1000}]}`, "Idempotency-Key", "k-3"); r.status != 201 {
		t.Fatalf("retry after failure = %d %s", r.status, r.raw)
	}

	// Concurrent duplicates with one key make one order.
	var wg sync.WaitGroup
	var created, replayed, inFlight atomic.Int32
	for range 12 {
		wg.Go(func() {
			r := e.order(`{"lines":[{"sku":"a","quantity":7}]}`, "Idempotency-Key", "k-4")
			switch {
			case r.status == 201 && r.header.Get("Idempotent-Replayed") == "":
				created.Add(1)
			case r.status == 201:
				replayed.Add(1)
			case r.code() == "idempotency_key_in_flight":
				inFlight.Add(1)
			default:
				t.Errorf("concurrent duplicate: %d %s", r.status, r.raw)
			}
		})
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Fatalf("%d orders created for one key (replayed %d, in flight %d)", created.Load(), replayed.Load(), inFlight.Load())
	}
	if a := e.audit("a"); a.Held != 3+1000+7 || a.Sold != 3 || !a.Consistent {
		t.Fatalf("audit = %+v", a)
	}
}

func TestStaleFence(t *testing.T) {
	e := newEnv(t)
	e.stock("a", 10) // the row now carries a token near 100
	e.locker.next.Store(5)
	expect(t, e.order(`{"lines":[{"sku":"a","quantity":1}]}`), 409, "stale_fence")
	if a := e.audit("a"); a.Held != 0 || a.Available != 10 {
		t.Fatalf("stale write left something behind: %+v", a)
	}
	m := e.do("GET", "/metrics", "")
	if !strings.Contains(m.raw, "stockguard_stale_fence_total 1") {
		t.Fatalf("metrics do not count the stale fence:\n%s", grep(m.raw, "stockguard_"))
	}
	for _, name := range []string{"stockguard_lock_wait_seconds_bucket{backend=\"test\"", "stockguard_orders_total{code=\"stale_fence\"} 1",
		"stockguard_http_requests_total{method=\"POST\",route=\"/v1/orders\",status=\"409\"} 1"} {
		if !strings.Contains(m.raw, name) {
			t.Errorf("metrics lack %s", name)
		}
	}
}

func TestLockUnavailable(t *testing.T) {
	e := newEnv(t)
	e.stock("a", 10)
	held, err := e.locker.Acquire(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	r := e.order(`{"lines":[{"sku":"a","quantity":1}]}`)
	expect(t, r, 503, "lock_unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
}

func TestReaperExpiresHolds(t *testing.T) {
	e := newEnv(t)
	e.stock("a", 10)
	r := e.order(`{"lines":[{"sku":"a","quantity":4}],"hold_seconds":1}`)
	if r.status != 201 {
		t.Fatalf("place = %d %s", r.status, r.raw)
	}
	id := r.body["order_id"].(string)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.svc.Reap(ctx, 100*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for {
		g := e.do("GET", "/v1/orders/"+id, "")
		if g.body["status"] == "expired" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order not expired 10 s after its 1 s hold: %s", g.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a := e.audit("a"); a.Available != 10 || a.Held != 0 || !a.Consistent {
		t.Fatalf("audit after expiry = %+v", a)
	}
	expect(t, e.do("POST", "/v1/orders/"+id+"/confirm", ""), 409, "invalid_transition")
}

func grep(s, substr string) string {
	var b bytes.Buffer
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/client"
)

// newClient is a client of f through its validating transport.
func (f *fixture) newClient(opts ...client.Option) *client.Client {
	f.t.Helper()
	c, err := client.New(f.url, append([]client.Option{client.WithHTTPClient(f.http), client.WithAdminToken(adminToken)}, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// attempts records what an Observer is told.
type attempts struct {
	mu  sync.Mutex
	all []client.Attempt
}

func (a *attempts) observe(at client.Attempt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.all = append(a.all, at)
}

func (a *attempts) list() []client.Attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]client.Attempt(nil), a.all...)
}

func mustStock(t *testing.T, c *client.Client, sku string, n int64) {
	t.Helper()
	if _, err := c.SetStock(context.Background(), sku, n); err != nil {
		t.Fatal(err)
	}
}

func TestLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.newClient()
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := c.SetStock(ctx, "gadget:blue", 10)
	if err != nil || s.Available != 10 || s.Received != 10 {
		t.Fatalf("SetStock = %+v, %v", s, err)
	}

	o, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "gadget:blue", Quantity: 3}}, HoldSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != client.StatusReserved || o.Replayed || o.IdempotencyKey == "" || len(o.Lines) != 1 ||
		time.Until(o.ExpiresAt) > time.Minute || time.Until(o.ExpiresAt) < 50*time.Second {
		t.Fatalf("placed %+v", o)
	}
	again, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "gadget:blue", Quantity: 3}}, HoldSeconds: 60,
		IdempotencyKey: o.IdempotencyKey})
	if err != nil || !again.Replayed || again.ID != o.ID {
		t.Fatalf("replay = %+v, %v; want order %s replayed", again, err, o.ID)
	}
	if s, err := c.SKU(ctx, "gadget:blue"); err != nil || s.Available != 7 || s.Reserved != 3 {
		t.Fatalf("SKU after the order = %+v, %v", s, err)
	}
	for range 2 { // confirming twice is not an error
		if got, err := c.Confirm(ctx, o.ID); err != nil || got.Status != client.StatusConfirmed {
			t.Fatalf("Confirm = %+v, %v", got, err)
		}
	}
	if _, err := c.Cancel(ctx, o.ID); !errors.Is(err, client.ErrInvalidTransition) {
		t.Fatalf("Cancel of a confirmed order = %v, want invalid_transition", err)
	}
	second, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "gadget:blue", Quantity: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Cancel(ctx, second.ID); err != nil || got.Status != client.StatusCancelled {
		t.Fatalf("Cancel = %+v, %v", got, err)
	}
	if got, err := c.Order(ctx, o.ID); err != nil || got.Status != client.StatusConfirmed || got.Lines[0].Quantity != 3 {
		t.Fatalf("Order = %+v, %v", got, err)
	}
	a, err := c.Audit(ctx, "gadget:blue")
	if err != nil || !a.Consistent || a.Sold != 3 || a.Held != 0 || a.Available != 7 {
		t.Fatalf("Audit = %+v, %v", a, err)
	}
	// /metrics in both the formats the spec names (the transport checks
	// each answer's content type and body against it).
	for _, accept := range []string{"text/plain", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"} {
		if res, raw := f.raw("GET", "/metrics", "", "Accept", accept); res == nil || res.StatusCode != http.StatusOK || len(raw) == 0 {
			t.Fatalf("GET /metrics (Accept: %s) = %v", accept, res)
		}
	}
	if n := len(f.tr.exchanges()); n < 14 {
		t.Fatalf("the transport validated %d exchanges, want every one of at least 12", n)
	}
}

func TestTypedErrors(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var seen attempts
	c := f.newClient(client.WithObserver(seen.observe))
	mustStock(t, c, "a", 2)

	_, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 5}}})
	var ae *client.APIError
	if !errors.Is(err, client.ErrInsufficientStock) || !errors.As(err, &ae) {
		t.Fatalf("order over stock = %v, want insufficient_stock", err)
	}
	if ae.Status != http.StatusConflict || ae.SKU != "a" || ae.Requested != 5 || ae.Available != 2 || ae.RequestID == "" {
		t.Fatalf("insufficient_stock = %+v", ae)
	}

	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"unknown SKU", func() error { _, err := c.SKU(ctx, "nope"); return err }, client.ErrUnknownSKU},
		{"order of an unknown SKU", func() error {
			_, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "nope", Quantity: 1}}})
			return err
		}, client.ErrUnknownSKU},
		{"unknown order", func() error { _, err := c.Order(ctx, "0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e10"); return err }, client.ErrUnknownOrder},
		{"quantity 0", func() error {
			_, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 0}}})
			return err
		}, client.ErrInvalidRequest},
		{"key reused", func() error {
			if _, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}}, IdempotencyKey: "k"}); err != nil {
				return err
			}
			_, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 2}}, IdempotencyKey: "k"})
			return err
		}, client.ErrIdempotencyKeyReused},
		{"no admin token", func() error {
			anon, err := client.New(f.url, client.WithHTTPClient(f.http))
			if err != nil {
				return err
			}
			_, err = anon.SetStock(ctx, "a", 1)
			return err
		}, client.ErrUnauthorized},
	}
	for _, tc := range cases {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, a := range seen.list() {
		if a.Retry {
			t.Errorf("a final answer was retried: %+v", a)
		}
	}
	if ae := (*client.APIError)(nil); errors.As(func() error { _, err := c.SKU(ctx, "nope"); return err }(), &ae) && ae.SKU != "nope" {
		t.Errorf("unknown_sku names %q, want nope", ae.SKU)
	}
}

// TestSetStockIf: the level is set over the counters read, and refused
// with ErrStockChanged, naming the SKU and the counters that differ, over
// any others; a missing SKU, passed as SKU{}, has 0 of each.
func TestSetStockIf(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.newClient()
	mustStock(t, c, "a", 10)
	read, err := c.SKU(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 3}}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.SetStockIf(ctx, "a", 15, *read)
	var ae *client.APIError
	if !errors.Is(err, client.ErrStockChanged) || !errors.As(err, &ae) {
		t.Fatalf("SetStockIf over 10 with 7 available = %v, want stock_changed", err)
	}
	if ae.Status != http.StatusConflict || ae.SKU != "a" || !strings.HasSuffix(ae.Message, ": available is 7, not the expected 10") {
		t.Fatalf("stock_changed = %+v", ae)
	}
	if read, err = c.SKU(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if s, err := c.SetStockIf(ctx, "a", 12, *read); err != nil || s.Available != 12 || s.Received != 15 {
		t.Fatalf("SetStockIf over the 7 available = %+v, %v", s, err)
	}
	_, err = c.SetStockIf(ctx, "new", 4, client.SKU{Received: 5})
	if !errors.As(err, &ae) || !errors.Is(err, client.ErrStockChanged) || !strings.HasSuffix(ae.Message, ": received is 0, not the expected 5") {
		t.Fatalf("SetStockIf expecting received 5 of a missing SKU = %v, want stock_changed naming received", err)
	}
	if _, err := c.SKU(ctx, "new"); !errors.Is(err, client.ErrUnknownSKU) {
		t.Fatalf("after a refused SetStockIf the SKU reads %v, want unknown_sku", err)
	}
	if s, err := c.SetStockIf(ctx, "new", 4, client.SKU{}); err != nil || s.Available != 4 {
		t.Fatalf("SetStockIf with SKU{} of a missing SKU = %+v, %v, want it created", s, err)
	}
}

// landedTransport loses the answer to the first request of its method
// after the service has applied it, and runs between before the client
// learns of the loss: what happens to the service before the retry.
type landedTransport struct {
	next    http.RoundTripper
	method  string // of the request whose answer is lost
	between func()
	lost    atomic.Bool
}

func (lt *landedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := lt.next.RoundTrip(req)
	if err != nil || req.Method != lt.method || lt.lost.Swap(true) {
		return res, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	lt.between()
	return nil, errors.New("answer lost on the way back")
}

// TestSetStockIfLostAnswer: the first attempt adds 5 units to the 10 read
// and its answer is lost; orders take 5 units before the retry, so
// available is 10 again. The retry is refused on received, which the first
// attempt moved, and the 5 units are there once: the caller, told of two
// attempts, reads the SKU to learn that its write landed.
func TestSetStockIfLostAnswer(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	admin := f.newClient()
	mustStock(t, admin, "a", 10)
	read, err := admin.SKU(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	lt := &landedTransport{next: f.tr, method: http.MethodPut, between: func() {
		if _, err := admin.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 5}}}); err != nil {
			t.Error(err)
		}
	}}
	c := f.newClient(client.WithHTTPClient(&http.Client{Transport: lt}), client.WithInFlightBackoff(time.Millisecond))
	_, err = c.SetStockIf(ctx, "a", read.Available+5, *read)
	var ae *client.APIError
	if !errors.Is(err, client.ErrStockChanged) || !errors.Is(err, client.ErrOutcomeUnknown) || !errors.As(err, &ae) ||
		!strings.HasSuffix(ae.Message, ": received is 15, not the expected 10") || !strings.Contains(err.Error(), "2 attempts") {
		t.Fatalf("SetStockIf whose first answer was lost = %v, want stock_changed on received after 2 attempts, an unknown outcome", err)
	}
	if k, err := admin.SKU(ctx, "a"); err != nil || k.Available != 10 || k.Reserved != 5 || k.Received != 15 {
		t.Fatalf("after the retry = %+v, %v; want available 10, reserved 5, received 15: the 5 units added once", k, err)
	}
	if a, err := admin.Audit(ctx, "a"); err != nil || !a.Consistent || a.Received != 15 {
		t.Fatalf("audit = %+v, %v", a, err)
	}
}

// TestRetryAfter holds the SKU's lock so the service answers 503
// lock_unavailable, then lets it go: the client waits the Retry-After and
// the retry, with the same key, places the order once.
func TestRetryAfter(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var seen attempts
	c := f.newClient(client.WithObserver(seen.observe))
	mustStock(t, c, "a", 10)
	release := f.hold("a")
	time.AfterFunc(lockWait+200*time.Millisecond, release)

	start := time.Now()
	o, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	var all []client.Attempt
	for _, a := range seen.list() {
		if a.Op == "placeOrder" {
			all = append(all, a)
		}
	}
	first, last := all[0], all[len(all)-1]
	if first.Status != http.StatusServiceUnavailable || first.Code != "lock_unavailable" || !first.Retry ||
		last.Status != http.StatusCreated || last.Retry || last.N != len(all) {
		t.Fatalf("attempts = %+v", all)
	}
	// The service says Retry-After: 1; the second attempt came no sooner.
	if d := time.Since(start); d < lockWait+time.Second {
		t.Fatalf("placed after %v: the Retry-After of 1s was not waited", d)
	}
	var keys []string
	for _, e := range f.tr.exchanges() {
		if e.method == http.MethodPost {
			keys = append(keys, e.idempotencyKey)
		}
	}
	if len(keys) != len(all) || keys[0] != o.IdempotencyKey || keys[len(keys)-1] != o.IdempotencyKey {
		t.Fatalf("keys sent %q, want %q on each of %d attempts", keys, o.IdempotencyKey, len(all))
	}
	if a, err := c.Audit(ctx, "a"); err != nil || a.Held != 1 {
		t.Fatalf("audit %+v, %v: want the order placed once", a, err)
	}
}

// TestRetriesOff shows every answer to the caller: the load tester counts
// 503s this way.
func TestRetriesOff(t *testing.T) {
	f := newFixture(t)
	var seen attempts
	c := f.newClient(client.WithRetries(0), client.WithObserver(seen.observe))
	mustStock(t, c, "a", 10)
	f.hold("a")
	_, err := c.PlaceOrder(context.Background(), client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}}})
	var ae *client.APIError
	if !errors.Is(err, client.ErrLockUnavailable) || !errors.As(err, &ae) || ae.RetryAfter != time.Second ||
		ae.Header.Get("Retry-After") != "1" {
		t.Fatalf("held lock = %v (%+v), want lock_unavailable with Retry-After 1s", err, ae)
	}
	if all := seen.list(); len(all) != 2 || all[1].Retry || all[1].Status != http.StatusServiceUnavailable {
		t.Fatalf("attempts (stock, order) = %+v", all)
	}
}

// TestRetriesBounded keeps the lock held: the retries run out, each wait
// capped by WithMaxRetryWait.
func TestRetriesBounded(t *testing.T) {
	f := newFixture(t)
	var seen attempts
	c := f.newClient(client.WithRetries(2), client.WithMaxRetryWait(50*time.Millisecond), client.WithObserver(seen.observe))
	mustStock(t, c, "a", 10)
	f.hold("a")
	start := time.Now()
	_, err := c.PlaceOrder(context.Background(), client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}}})
	if !errors.Is(err, client.ErrLockUnavailable) || !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("err = %v, want lock_unavailable after 3 attempts", err)
	}
	if n := len(seen.list()); n != 1+3 {
		t.Fatalf("%d attempts observed, want 1 stock + 3 order", n)
	}
	if d := time.Since(start); d > 3*lockWait+time.Second {
		t.Fatalf("3 attempts took %v: the waits were not capped at 50ms", d)
	}
}

// TestInFlightWaitedOut sends a repeat while the first request with its key
// is paused in its critical section for far longer than a few backoffs:
// with the default options, the client waits out the 409s and gets the
// first order, replayed.
func TestInFlightWaitedOut(t *testing.T) {
	f := newFixture(t)
	var seen attempts
	c := f.newClient(client.WithObserver(seen.observe))
	mustStock(t, c, "a", 10)
	type answer struct {
		status int
		id     string
	}
	first := make(chan answer, 1)
	go func() {
		res, raw := f.raw("POST", "/v1/orders", `{"lines":[{"sku":"a","quantity":1}]}`, "Idempotency-Key", "k-1", "X-Chaos-Pause", "1500ms")
		var o struct {
			ID string `json:"order_id"`
		}
		_ = json.Unmarshal(raw, &o)
		if res == nil {
			first <- answer{}
			return
		}
		first <- answer{res.StatusCode, o.ID}
	}()
	time.Sleep(200 * time.Millisecond)
	o, err := c.PlaceOrder(context.Background(), client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}}, IdempotencyKey: "k-1"})
	a := <-first
	if err != nil || a.status != http.StatusCreated || o.ID != a.id || !o.Replayed {
		t.Fatalf("repeat = %+v, %v; first %+v", o, err, a)
	}
	inFlight := 0
	for _, at := range seen.list() {
		if at.Code == "idempotency_key_in_flight" {
			inFlight++
		}
	}
	if inFlight == 0 {
		t.Fatalf("no 409 idempotency_key_in_flight observed: %+v", seen.list())
	}
}

// TestNoAnswer retries a call that got no answer, then reports the
// transport's error.
func TestNoAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	var seen attempts
	c, err := client.New(url, client.WithRetries(2), client.WithInFlightBackoff(time.Millisecond), client.WithObserver(seen.observe))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SKU(context.Background(), "a")
	var ae *client.APIError
	if err == nil || errors.As(err, &ae) {
		t.Fatalf("err = %v, want a transport error", err)
	}
	if all := seen.list(); len(all) != 3 || all[2].Status != 0 || all[2].Retry {
		t.Fatalf("attempts = %+v", all)
	}
}

// TestContextEndsTheWait: a call waiting out a Retry-After returns when
// its context ends.
func TestContextEndsTheWait(t *testing.T) {
	f := newFixture(t)
	c := f.newClient()
	mustStock(t, c, "a", 10)
	f.hold("a")
	ctx, cancel := context.WithTimeout(context.Background(), lockWait+200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}}})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrLockUnavailable) {
		t.Fatalf("err = %v, want the deadline and the last answer", err)
	}
	if d := time.Since(start); d > lockWait+700*time.Millisecond {
		t.Fatalf("returned after %v, past the context's deadline", d)
	}
}

func TestNewRefusesBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://host", "http://", "http:host", "http://host/?x=1",
		"http://host?", "http://host/api#top"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

// TestBaseURLPath: requests go under the base URL's path, with or without
// its trailing slash.
func TestBaseURLPath(t *testing.T) {
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.EscapedPath()
	}))
	t.Cleanup(srv.Close)
	for _, base := range []string{srv.URL + "/stock", srv.URL + "/stock/"} {
		c, err := client.New(base)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Healthz(context.Background()); err != nil {
			t.Fatal(err)
		}
		if p := <-got; p != "/stock/healthz" {
			t.Errorf("base %s: GET %s, want /stock/healthz", base, p)
		}
	}
}

package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const orderBody = `{"lines":[{"sku":"a","quantity":2}]}`

// canned answers one status, header and body to every request, and counts
// them.
type canned struct {
	status int
	header http.Header
	body   string
	delay  time.Duration
	n      atomic.Int64
}

func (c *canned) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	time.Sleep(c.delay)
	for k, v := range c.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(c.status)
	_, _ = w.Write([]byte(c.body))
}

func apiErr(code string) string { return `{"error":{"code":"` + code + `","message":"` + code + `"}}` }

// TestOrderKinds classifies each answer the runner counts apart, one
// request per call: the public client's retries are off, so a 503 or a 409
// in flight reaches the tally instead of being waited out.
func TestOrderKinds(t *testing.T) {
	retry := http.Header{"Retry-After": {"1"}}
	created := `{"order_id":"0b8f3c1e-6f1a-4c55-9a8e-2d1f0c9b7a6e","status":"reserved",` +
		`"lines":[{"sku":"a","quantity":2,"fence_token":42}],"expires_at":"2026-12-01T14:00:00.5Z"}`
	cases := []struct {
		name    string
		answer  *canned
		kind    Kind
		code    string
		retry   string
		settled bool
	}{
		{"reserved", &canned{status: 201, body: created}, KindReserved, "", "", true},
		{"insufficient", &canned{status: 409, body: apiErr("insufficient_stock")}, KindInsufficient, "insufficient_stock", "", true},
		// Overtaken: an earlier attempt with the key may hold the newer lease.
		{"stale fence", &canned{status: 409, body: apiErr("stale_fence")}, KindStaleFence, "stale_fence", "", false},
		{"lock unavailable", &canned{status: 503, header: retry, body: apiErr("lock_unavailable")}, KindLockUnavailable, "lock_unavailable", "1", false},
		{"key in flight", &canned{status: 409, body: apiErr("idempotency_key_in_flight")}, KindUnknown, "idempotency_key_in_flight", "", false},
		{"store unavailable", &canned{status: 503, header: retry, body: apiErr("store_unavailable")}, KindUnknown, "store_unavailable", "1", false},
		{"timeout", &canned{status: 503, header: http.Header{"Retry-After": {"0"}}, body: apiErr("timeout")}, KindUnknown, "timeout", "0", false},
		{"overloaded", &canned{status: 503, header: retry, body: apiErr("overloaded")}, KindError, "overloaded", "1", false},
		{"key reused", &canned{status: 422, body: apiErr("idempotency_key_reused")}, KindError, "idempotency_key_reused", "", true},
		// Every other 5xx may follow a commit: unknown, to be resent with its key.
		{"internal", &canned{status: 500, body: apiErr("internal")}, KindUnknown, "internal", "", false},
		{"not the API's body", &canned{status: 502, body: "<html>bad gateway</html>"}, KindUnknown, "http_502", "", false},
		{"gateway timeout", &canned{status: 504, body: "<html>gateway timeout</html>"}, KindUnknown, "http_504", "", false},
		{"proxy's 503", &canned{status: 503, body: "<html>unavailable</html>"}, KindUnknown, "http_503", "", false},
		// Placed, but which order is not known: a resend with the key tells.
		{"unreadable 201", &canned{status: 201, body: "<html>"}, KindUnknown, "bad_201_body", "", false},
		{"201 without an id", &canned{status: 201, body: `{"status":"reserved","lines":[],"expires_at":"2026-12-01T14:00:00Z"}`}, KindUnknown, "bad_201_body", "", false},
		{"201 cut short", &canned{status: 201, body: `{"order_id":"0b8f3c1e-6f1a-4c55-9a8e-2d1f0c9b7a6e","status":"res`}, KindUnknown, "bad_201_body", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.answer)
			t.Cleanup(srv.Close)
			c := New(2, "", 5*time.Second)
			t.Cleanup(c.Close)
			out := c.PlaceOrder(context.Background(), srv.URL, "k-1", []byte(orderBody))
			if out.Kind != tc.kind || out.Code != tc.code || out.RetryAfter != tc.retry || out.Status != tc.answer.status {
				t.Fatalf("outcome %+v, want %v %q Retry-After %q", out, tc.kind, tc.code, tc.retry)
			}
			if out.Settled() != tc.settled {
				t.Fatalf("Settled() = %v, want %v", out.Settled(), tc.settled)
			}
			if tc.kind == KindUnknown && out.Answered() {
				t.Fatal("an unknown outcome reads as Answered()")
			}
			if (out.Err == nil) != (tc.kind == KindReserved) {
				t.Fatalf("err = %v", out.Err)
			}
			if n := tc.answer.n.Load(); n != 1 {
				t.Fatalf("%d requests for one call, want 1: the load tester retries by itself", n)
			}
		})
	}
}

func TestReservedOrder(t *testing.T) {
	srv := httptest.NewServer(&canned{status: 201, body: `{"order_id":"0190a3e4-7c1d-7b2a-9f00-000000000001","status":"reserved",` +
		`"lines":[{"sku":"a","quantity":2,"fence_token":42},{"sku":"b","quantity":1,"fence_token":7}],` +
		`"expires_at":"2026-12-01T14:00:00.5Z"}`})
	t.Cleanup(srv.Close)
	c := New(2, "", 5*time.Second)
	t.Cleanup(c.Close)
	out := c.PlaceOrder(context.Background(), srv.URL, "k-1", []byte(orderBody))
	o := out.Order
	if o == nil || o.OrderID != "0190a3e4-7c1d-7b2a-9f00-000000000001" || o.Status != "reserved" || o.ExpiresAt != "2026-12-01T14:00:00.5Z" || len(o.Lines) != 2 ||
		o.Lines[0].SKU != "a" || o.Lines[0].Quantity != 2 || o.Lines[0].FenceToken != 42 || o.Lines[1].FenceToken != 7 {
		t.Fatalf("order %+v", o)
	}
}

// TestNoAnswer: an order that got no answer is unknown, named by why.
func TestNoAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	slow := &canned{status: 201, body: `{}`, delay: 500 * time.Millisecond}
	srv := httptest.NewServer(slow)
	t.Cleanup(srv.Close)
	c := New(2, "", 100*time.Millisecond)
	t.Cleanup(c.Close)
	ctx := context.Background()
	if out := c.PlaceOrder(ctx, refused, "k", []byte(orderBody)); out.Kind != KindUnknown || out.Code != "connection_refused" || out.Status != 0 {
		t.Errorf("refused: %+v", out)
	}
	if out := c.PlaceOrder(ctx, srv.URL, "k", []byte(orderBody)); out.Kind != KindUnknown || out.Code != "timeout" {
		t.Errorf("past the request timeout: %+v", out)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if out := c.PlaceOrder(cancelled, srv.URL, "k", []byte(orderBody)); out.Kind != KindUnknown || out.Code != "cancelled" {
		t.Errorf("cancelled: %+v", out)
	}
	if out := c.PlaceOrder(ctx, "127.0.0.1:8080", "k", []byte(orderBody)); out.Kind != KindError || out.Code != "bad_url" {
		t.Errorf("a base without a scheme: %+v", out)
	}
}

// TestUnreadableSettleIsUnknown: a 200 to a confirm or a cancel says it was
// applied; one whose order cannot be read is no refusal, but unknown.
func TestUnreadableSettleIsUnknown(t *testing.T) {
	srv := httptest.NewServer(&canned{status: 200, body: "<html>"})
	t.Cleanup(srv.Close)
	c := New(2, "", 5*time.Second)
	t.Cleanup(c.Close)
	const id = "0b8f3c1e-6f1a-4c55-9a8e-2d1f0c9b7a6e"
	for name, out := range map[string]Outcome{
		"confirm": c.ConfirmOrder(context.Background(), srv.URL, id),
		"cancel":  c.CancelOrder(context.Background(), srv.URL, id),
	} {
		if out.Kind != KindUnknown || out.Status != 200 || out.Code != "bad_200_body" || out.Settled() || out.Answered() {
			t.Errorf("%s answered 200 <html> = %+v, want unknown, bad_200_body, neither settled nor answered", name, out)
		}
	}
}

// TestNotSent: what the public client refuses to send (a key or an order
// id the service would refuse) had no attempt: a settled error, nothing
// applied, never an unknown outcome to resend.
func TestNotSent(t *testing.T) {
	srv := httptest.NewServer(&canned{status: 201, body: `{}`})
	t.Cleanup(srv.Close)
	c := New(2, "", 5*time.Second)
	t.Cleanup(c.Close)
	ctx := context.Background()
	for name, out := range map[string]Outcome{
		"a key ending in a space": c.PlaceOrder(ctx, srv.URL, "k-1 ", []byte(orderBody)),
		"a confirm of no uuid":    c.ConfirmOrder(ctx, srv.URL, "not-a-uuid"),
		"a cancel of \"\"":        c.CancelOrder(ctx, srv.URL, ""),
	} {
		if out.Kind != KindError || out.Code != "not_sent" || out.Status != 0 || out.Err == nil || !out.Settled() || !out.Answered() {
			t.Errorf("%s = %+v, want a settled error not_sent", name, out)
		}
	}
	if n := srv.Config.Handler.(*canned).n.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
}

// TestAnswerHeadersBounded: the transport reads 64 KiB of an answer's
// headers, not net/http's 10 MiB; past that, the attempt got no answer.
func TestAnswerHeadersBounded(t *testing.T) {
	for size, kind := range map[int]Kind{60 << 10: KindLockUnavailable, 8 << 20: KindUnknown} {
		srv := httptest.NewServer(&canned{status: 503, body: apiErr("lock_unavailable"),
			header: http.Header{"Retry-After": {"1"}, "X-Junk": {strings.Repeat("x", size)}}})
		c := New(2, "", 5*time.Second)
		out := c.PlaceOrder(context.Background(), srv.URL, "k-1", []byte(orderBody))
		c.Close()
		srv.Close()
		if out.Kind != kind {
			t.Fatalf("a 503 with %d bytes of headers = %v %q, want %v", size, out.Kind, out.Code, kind)
		}
	}
}

// TestRequests checks what each call sends, through WrapTransport: the
// wrapper sees every request of every instance's client.
func TestRequests(t *testing.T) {
	type seen struct{ method, uri, key, auth string }
	got := make(chan seen, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = w.Write([]byte("# TYPE stockguard_stale_fence_total counter\nstockguard_stale_fence_total 3\n"))
		case "/debug/zk-session":
			_, _ = w.Write([]byte(`{"session_id":72057594037927937,"session_id_hex":"0x100000000000001","password_hex":"00ff"}`))
		case "/v1/skus/a.b", "/v1/skus/a.b/audit":
			_, _ = w.Write([]byte(`{"sku":"a.b","available":5,"received":5,"consistent":true}`))
		case "/v1/orders/0b9f7d0e-2c1a-4a6e-9a53-5d0c1e2f3a4b/confirm", "/v1/orders/0b9f7d0e-2c1a-4a6e-9a53-5d0c1e2f3a4b/cancel":
			_, _ = w.Write([]byte(`{"order_id":"0b9f7d0e-2c1a-4a6e-9a53-5d0c1e2f3a4b","status":"confirmed","lines":[],"expires_at":"2026-12-01T14:00:00Z"}`))
		case "/readyz":
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(apiErr("not_ready")))
		}
	}))
	t.Cleanup(srv.Close)
	c := New(2, "s3cret", 5*time.Second)
	t.Cleanup(c.Close)
	c.WrapTransport(func(next http.RoundTripper) http.RoundTripper {
		return roundTrip(func(r *http.Request) (*http.Response, error) {
			got <- seen{r.Method, r.URL.RequestURI(), r.Header.Get("Idempotency-Key"), r.Header.Get("Authorization")}
			return next.RoundTrip(r)
		})
	})
	ctx := context.Background()
	if s, err := c.PutSKU(ctx, srv.URL, "a.b", 5); err != nil || s.Available != 5 {
		t.Fatalf("PutSKU = %+v, %v", s, err)
	}
	if s, err := c.GetSKU(ctx, srv.URL, "a.b"); err != nil || s.Received != 5 {
		t.Fatalf("GetSKU = %+v, %v", s, err)
	}
	if a, err := c.Audit(ctx, srv.URL, "a.b"); err != nil || !a.Consistent {
		t.Fatalf("Audit = %+v, %v", a, err)
	}
	if out := c.ConfirmOrder(ctx, srv.URL, "0b9f7d0e-2c1a-4a6e-9a53-5d0c1e2f3a4b"); out.Kind != KindReserved || out.Status != 200 || out.Order.Status != "confirmed" {
		t.Fatalf("ConfirmOrder = %+v", out)
	}
	if out := c.CancelOrder(ctx, srv.URL, "0b9f7d0e-2c1a-4a6e-9a53-5d0c1e2f3a4b"); out.Kind != KindReserved {
		t.Fatalf("CancelOrder = %+v", out)
	}
	var zk struct {
		SessionID int64 `json:"session_id"`
	}
	if err := c.GetJSON(ctx, srv.URL+"/debug/zk-session", &zk); err != nil || zk.SessionID != 72057594037927937 {
		t.Fatalf("GetJSON = %+v, %v", zk, err)
	}
	if raw, err := c.Metrics(ctx, srv.URL); err != nil || !strings.Contains(string(raw), "stockguard_stale_fence_total 3") {
		t.Fatalf("Metrics = %q, %v", raw, err)
	}
	if err := c.Healthy(ctx, srv.URL); err != nil {
		t.Fatalf("Healthy = %v", err)
	}
	var ae *APIError
	if err := c.Ready(ctx, srv.URL); !errors.As(err, &ae) || ae.Code != "not_ready" {
		t.Fatalf("Ready = %v, want not_ready", err)
	}
	if out := c.PlaceOrder(ctx, srv.URL+"/", "k-7", []byte(orderBody)); out.Status != 200 || out.Kind != KindError {
		t.Fatalf("PlaceOrder on an empty 200 = %+v", out)
	}
	close(got)
	want := []seen{
		{"PUT", "/v1/skus/a.b", "", "Bearer s3cret"},
		{"GET", "/v1/skus/a.b", "", ""},
		{"GET", "/v1/skus/a.b/audit", "", ""},
		{"POST", "/v1/orders/0b9f7d0e-2c1a-4a6e-9a53-5d0c1e2f3a4b/confirm", "", ""},
		{"POST", "/v1/orders/0b9f7d0e-2c1a-4a6e-9a53-5d0c1e2f3a4b/cancel", "", ""},
		{"GET", "/debug/zk-session", "", "Bearer s3cret"},
		{"GET", "/metrics", "", ""},
		{"GET", "/healthz", "", ""},
		{"GET", "/readyz", "", ""},
		{"POST", "/v1/orders", "k-7", ""},
	}
	i := 0
	for s := range got {
		if i >= len(want) || s != want[i] {
			t.Errorf("request %d = %+v, want %+v", i, s, want[min(i, len(want)-1)])
		}
		i++
	}
	if i != len(want) {
		t.Errorf("%d requests, want %d", i, len(want))
	}
	if n := len(c.of); n != 2 {
		t.Errorf("%d public clients after calls to two base URLs, want one each, made once", n)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

package client_test

// Tests of what a load generator uses beyond the typed calls: an order body
// encoded once, the metrics text, a GET of any path, and an answer that
// breaks the spec.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/client"
)

func TestPlaceOrderJSON(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.newClient(client.WithRetries(0))
	mustStock(t, c, "a", 5)
	body := []byte(`{"lines":[{"sku":"a","quantity":2}],"hold_seconds":60}`)

	o, err := c.PlaceOrderJSON(ctx, "k-json", body)
	if err != nil || o.Status != client.StatusReserved || o.Replayed || o.IdempotencyKey != "k-json" ||
		len(o.Lines) != 1 || o.Lines[0].SKU != "a" || o.Lines[0].Quantity != 2 {
		t.Fatalf("PlaceOrderJSON = %+v, %v", o, err)
	}
	again, err := c.PlaceOrderJSON(ctx, "k-json", body)
	if err != nil || !again.Replayed || again.ID != o.ID {
		t.Fatalf("replay = %+v, %v; want order %s replayed", again, err, o.ID)
	}
	fresh, err := c.PlaceOrderJSON(ctx, "", body)
	if err != nil || fresh.IdempotencyKey == "" || fresh.ID == o.ID {
		t.Fatalf("without a key = %+v, %v; want a new order under a key of its own", fresh, err)
	}
	if _, err := c.PlaceOrderJSON(ctx, "k-bad", []byte(`{"lines":[]}`)); !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("no lines = %v, want invalid_request", err)
	}
	if _, err := c.PlaceOrderJSON(ctx, "k-over", []byte(`{"lines":[{"sku":"a","quantity":9}]}`)); !errors.Is(err, client.ErrInsufficientStock) {
		t.Fatalf("over stock = %v, want insufficient_stock", err)
	}
	var keys []string
	for _, x := range f.tr.exchanges() {
		if x.path == "/v1/orders" {
			keys = append(keys, x.idempotencyKey)
		}
	}
	if len(keys) != 5 || keys[0] != "k-json" || keys[1] != "k-json" || keys[2] == "" || keys[3] != "k-bad" {
		t.Fatalf("keys sent = %q", keys)
	}
}

func TestMetrics(t *testing.T) {
	f := newFixture(t)
	c := f.newClient()
	mustStock(t, c, "a", 1)
	raw, err := c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "# TYPE stockguard_") {
		t.Fatalf("metrics are not the text format:\n%.300s", raw)
	}
}

// TestMetricsNeverCut: an answer past what the client reads is an error,
// not a text cut short that lacks the counters a caller looks for; one of
// exactly that size comes whole.
func TestMetricsNeverCut(t *testing.T) {
	const limit = 1 << 20
	for size, ok := range map[int]bool{limit: true, limit + 1: false, 3 * limit: false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = w.Write([]byte("# TYPE stockguard_x counter\n" + strings.Repeat("#", size-29) + "\n"))
		}))
		c, err := client.New(srv.URL, client.WithRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := c.Metrics(context.Background())
		srv.Close()
		if ok && (err != nil || len(raw) != size) || !ok && (!errors.Is(err, client.ErrBadAnswer) || raw != nil) {
			t.Fatalf("/metrics of %d bytes = %d bytes, %v; want it whole or ErrBadAnswer", size, len(raw), err)
		}
	}
}

// TestAnswerHeadersBounded: the default transport reads 64 KiB of an
// answer's headers, not net/http's 10 MiB: a broken server or proxy that
// sends megabytes of them with each answer is an attempt without an
// answer, whose headers no error keeps. Headers of 60 KiB still come.
func TestAnswerHeadersBounded(t *testing.T) {
	for size, ok := range map[int]bool{60 << 10: true, 8 << 20: false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Junk", strings.Repeat("x", size))
			w.Header().Set("Retry-After", "0")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"lock_unavailable","message":"x"}}`))
		}))
		c, err := client.New(srv.URL, client.WithRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.SKU(context.Background(), "a")
		srv.Close()
		var ae *client.APIError
		if got := errors.As(err, &ae); got != ok || got && len(ae.Header.Get("X-Junk")) != size {
			t.Fatalf("a 503 with %d bytes of headers = %.200v; want the answer %v", size, err, ok)
		}
	}
}

func TestGetJSON(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var seen attempts
	c := f.newClient(client.WithObserver(seen.observe))
	var s struct {
		SessionID    int64  `json:"session_id"`
		SessionIDHex string `json:"session_id_hex"`
		PasswordHex  string `json:"password_hex"`
	}
	if err := c.GetJSON(ctx, "/debug/zk-session", &s); err != nil {
		t.Fatal(err)
	}
	if s.SessionID != zkSessionID || s.SessionIDHex != "0x1000a2b3c4d5e6f" || s.PasswordHex != "30313233343536373839616263646566" {
		t.Fatalf("zk session = %+v", s)
	}
	if err := c.GetJSON(ctx, "/v1/skus/nope", &s); !errors.Is(err, client.ErrUnknownSKU) {
		t.Fatalf("GET of an unknown SKU = %v, want unknown_sku", err)
	}
	if err := c.GetJSON(ctx, "debug/zk-session", &s); err == nil {
		t.Fatal("a path without its leading slash was sent")
	}
	if all := seen.list(); len(all) != 2 || all[0].Op != "GET /debug/zk-session" {
		t.Fatalf("attempts = %+v", all)
	}
}

// TestBadAnswer: a success status with a body that is not the API's is
// ErrBadAnswer, not an APIError nor a transport error: one that does not
// decode, and one that decodes to nothing (null, {}), which would hand the
// caller an order without an id or a SKU without a name. The server breaks
// the spec on purpose, so no validating transport stands in between.
func TestBadAnswer(t *testing.T) {
	const id = "0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e10"
	ctx := context.Background()
	calls := map[string]func(*client.Client) error{
		"placeOrder":   func(c *client.Client) error { return second(c.PlaceOrderJSON(ctx, "k", oneLine)) },
		"getOrder":     func(c *client.Client) error { return second(c.Order(ctx, id)) },
		"confirmOrder": func(c *client.Client) error { return second(c.Confirm(ctx, id)) },
		"cancelOrder":  func(c *client.Client) error { return second(c.Cancel(ctx, id)) },
		"setStock":     func(c *client.Client) error { return second(c.SetStock(ctx, "a", 1)) },
		"setStockIf":   func(c *client.Client) error { return second(c.SetStockIf(ctx, "a", 1, client.SKU{})) },
		"getSKU":       func(c *client.Client) error { return second(c.SKU(ctx, "a")) },
		"auditSKU":     func(c *client.Client) error { return second(c.Audit(ctx, "a")) },
	}
	// answer serves body with each call's success status.
	answer := func(body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.Method == http.MethodPost && r.URL.Path == "/v1/orders" {
				w.WriteHeader(http.StatusCreated)
			}
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	for _, body := range []string{`<html>proxy page</html>`, `null`, `{}`, `{"status":"reserved","available":1}`} {
		c := mustNew(t, answer(body), client.WithRetries(0))
		for op, call := range calls {
			err := call(c)
			var ae *client.APIError
			if !errors.Is(err, client.ErrBadAnswer) || errors.As(err, &ae) {
				t.Errorf("%s answered %s: err = %v, want ErrBadAnswer", op, body, err)
			}
		}
	}
	// What every answer must have is enough.
	c := mustNew(t, answer(`{"order_id":"`+id+`","sku":"a"}`), client.WithRetries(0))
	for op, call := range calls {
		if err := call(c); err != nil {
			t.Errorf("%s answered with its id or name alone: %v", op, err)
		}
	}
}

// second returns a call's error, for a table of calls of different answers.
func second[T any](_ T, err error) error { return err }

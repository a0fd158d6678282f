package client_test

// Tests of what the client retries and what it treats as final, against
// servers that answer what each test needs (so no spec check stands in
// between), and of what it refuses to send at all.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/client"
	"github.com/stockguard/stockguard/internal/inventory"
)

// scripted serves fn's answer to each request, n counting them from 1, and
// returns the server's URL and the count.
func scripted(t *testing.T, fn func(n int, w http.ResponseWriter, r *http.Request)) (string, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fn(int(n.Add(1)), w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// answerError writes the API's error body; retryAfter "" sends none.
func answerError(w http.ResponseWriter, status int, code, retryAfter string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":"scripted"}}`, code)
}

// noAnswer drops the connection without a word.
func noAnswer(t *testing.T, w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Error(err)
		return
	}
	_ = conn.Close()
}

func mustNew(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var oneLine = []byte(`{"lines":[{"sku":"a","quantity":1}]}`)

// TestInFlightWaitBounded: a key that stays in flight is waited out for
// WithInFlightWait, by time and not by the retries (one, here), and the
// caller then gets the 409.
func TestInFlightWaitBounded(t *testing.T) {
	url, n := scripted(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		answerError(w, http.StatusConflict, "idempotency_key_in_flight", "")
	})
	c := mustNew(t, url, client.WithRetries(1), client.WithInFlightBackoff(5*time.Millisecond),
		client.WithInFlightWait(300*time.Millisecond))
	start := time.Now()
	_, err := c.PlaceOrderJSON(context.Background(), "k", oneLine)
	d := time.Since(start)
	if !errors.Is(err, client.ErrIdempotencyKeyInFlight) {
		t.Fatalf("err = %v, want idempotency_key_in_flight", err)
	}
	if n.Load() <= 2 || d < 300*time.Millisecond || d > 2*time.Second {
		t.Fatalf("%d attempts in %v, want more than the 2 the retries allow, for 300ms", n.Load(), d)
	}
}

// TestInFlightLeavesRetries: waiting out a key in flight spends none of the
// retries a later 503 needs.
func TestInFlightLeavesRetries(t *testing.T) {
	url, n := scripted(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		switch {
		case n <= 5:
			answerError(w, http.StatusConflict, "idempotency_key_in_flight", "")
		case n <= 7:
			answerError(w, http.StatusServiceUnavailable, "lock_unavailable", "0")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"order_id":"0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e10","status":"reserved","lines":[]}`)
		}
	})
	c := mustNew(t, url, client.WithRetries(2), client.WithInFlightBackoff(time.Millisecond))
	if _, err := c.PlaceOrderJSON(context.Background(), "k", oneLine); err != nil || n.Load() != 8 {
		t.Fatalf("after 5 × 409 and 2 × 503: %v after %d attempts, want the order on the 8th", err, n.Load())
	}
}

// TestOutcomeUnknownUnlessSettled: an order's error matches
// ErrOutcomeUnknown when the order may have been placed: its last attempt
// may have placed it, or its key was still in flight, or an earlier
// attempt got no answer and the last answer does not tell what became of
// that one. Only a 4xx any attempt of the same order would get does: a 503
// overloaded or lock_unavailable, a stale_fence, an insufficient_stock or
// an invalid_request may answer the last attempt alone. The error still
// matches the last answer and carries the key.
func TestOutcomeUnknownUnlessSettled(t *testing.T) {
	answer := func(status int, code string) func(*testing.T, http.ResponseWriter) {
		return func(_ *testing.T, w http.ResponseWriter) { answerError(w, status, code, "0") }
	}
	unread := func(_ *testing.T, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `<html>proxy page</html>`)
	}
	proxy429 := func(_ *testing.T, w http.ResponseWriter) { w.WriteHeader(http.StatusTooManyRequests) }
	cases := []struct {
		name    string
		first   func(*testing.T, http.ResponseWriter) // nil: as the others
		last    func(*testing.T, http.ResponseWriter)
		code    string // of the last answer, "" for none
		unknown bool
	}{
		{"lost, then overloaded", noAnswer, answer(503, "overloaded"), "overloaded", true},
		{"lost, then lock_unavailable", noAnswer, answer(503, "lock_unavailable"), "lock_unavailable", true},
		{"lost, then stale_fence", noAnswer, answer(409, "stale_fence"), "stale_fence", true},
		{"lost, then insufficient_stock", noAnswer, answer(409, "insufficient_stock"), "insufficient_stock", true},
		{"lost, then in flight", noAnswer, answer(409, "idempotency_key_in_flight"), "idempotency_key_in_flight", true},
		{"lost, then invalid_request", noAnswer, answer(400, "invalid_request"), "invalid_request", true},
		{"lost, then a proxy's 429", noAnswer, proxy429, "", true},
		{"lost, then key reused", noAnswer, answer(422, "idempotency_key_reused"), "idempotency_key_reused", false},
		{"lost, then unknown_sku", noAnswer, answer(404, "unknown_sku"), "unknown_sku", false},
		{"lost, then unauthorized", noAnswer, answer(401, "unauthorized"), "unauthorized", false},
		{"store_unavailable, then lock_unavailable", answer(503, "store_unavailable"), answer(503, "lock_unavailable"), "lock_unavailable", true},
		{"a 201 unread, then overloaded", unread, answer(503, "overloaded"), "overloaded", true},
		{"overloaded throughout", nil, answer(503, "overloaded"), "overloaded", false},
		{"lock_unavailable, then insufficient_stock", answer(503, "lock_unavailable"), answer(409, "insufficient_stock"), "insufficient_stock", false},
		{"stale_fence", nil, answer(409, "stale_fence"), "stale_fence", false},
		{"store_unavailable throughout", nil, answer(503, "store_unavailable"), "store_unavailable", true},
		{"timeout throughout", nil, answer(503, "timeout"), "timeout", true},
		{"in flight throughout", nil, answer(409, "idempotency_key_in_flight"), "idempotency_key_in_flight", true},
		{"no answer throughout", nil, noAnswer, "", true},
		{"a 201 unread throughout", nil, unread, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := scripted(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				if n == 1 && tc.first != nil {
					tc.first(t, w)
					return
				}
				tc.last(t, w)
			})
			c := mustNew(t, url, client.WithRetries(1), client.WithInFlightBackoff(time.Millisecond),
				client.WithInFlightWait(20*time.Millisecond))
			_, err := c.PlaceOrderJSON(context.Background(), "k", oneLine)
			var ae *client.APIError
			if err == nil || errors.Is(err, client.ErrOutcomeUnknown) != tc.unknown || client.IdempotencyKeyOf(err) != "k" {
				t.Fatalf("err = %v, key %q; want an unknown outcome %v, key k", err, client.IdempotencyKeyOf(err), tc.unknown)
			}
			if tc.code != "" && (!errors.As(err, &ae) || ae.Code != tc.code) {
				t.Fatalf("err = %v, want the last answer, %s", err, tc.code)
			}
			if strings.Contains(err.Error(), "outcome unknown") != tc.unknown {
				t.Fatalf("message %q", err)
			}
		})
	}

	// A read writes nothing, and a request never sent wrote nothing.
	url, _ := scripted(t, func(_ int, w http.ResponseWriter, _ *http.Request) { noAnswer(t, w) })
	c := mustNew(t, url, client.WithRetries(1), client.WithInFlightBackoff(time.Millisecond))
	if _, err := c.SKU(context.Background(), "a"); err == nil || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("a read without an answer = %v, want no unknown outcome", err)
	}
	if _, err := c.PlaceOrderJSON(context.Background(), " k", oneLine); !errors.Is(err, client.ErrInvalidRequest) ||
		errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("an order not sent = %v, want invalid_request, no unknown outcome", err)
	}
	if _, err := c.Confirm(context.Background(), "0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e10"); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("a confirm without an answer = %v, want an unknown outcome", err)
	}
}

// TestSetStockRepeatsOnlyWhatWroteNothing: SetStock sets an absolute value,
// so it is retried after a 503 that says nothing was written, never after
// no answer or one that may come after a write.
func TestSetStockRepeatsOnlyWhatWroteNothing(t *testing.T) {
	cases := []struct {
		name     string
		first    func(t *testing.T, w http.ResponseWriter)
		attempts int32
	}{
		{"no answer", noAnswer, 1},
		{"store_unavailable", func(_ *testing.T, w http.ResponseWriter) {
			answerError(w, http.StatusServiceUnavailable, "store_unavailable", "0")
		}, 1},
		{"timeout", func(_ *testing.T, w http.ResponseWriter) {
			answerError(w, http.StatusServiceUnavailable, "timeout", "0")
		}, 1},
		{"lock_unavailable", func(_ *testing.T, w http.ResponseWriter) {
			answerError(w, http.StatusServiceUnavailable, "lock_unavailable", "0")
		}, 2},
		{"overloaded", func(_ *testing.T, w http.ResponseWriter) {
			answerError(w, http.StatusServiceUnavailable, "overloaded", "0")
		}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, n := scripted(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				if n == 1 {
					tc.first(t, w)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"sku":"a","available":5,"received":5}`)
			})
			c := mustNew(t, url, client.WithInFlightBackoff(time.Millisecond))
			_, err := c.SetStock(context.Background(), "a", 5)
			if n.Load() != tc.attempts || (err == nil) != (tc.attempts == 2) {
				t.Fatalf("%d attempts, err %v; want %d", n.Load(), err, tc.attempts)
			}
		})
	}
}

// TestSetStockIfRepeats: SetStockIf sends the counters of the SKU it was
// given, available and received, on every attempt, which makes a repeat of
// one that landed answer stock_changed, so it is retried after any 503 and
// after no answer; stock_changed itself is final, and the caller, not the
// client, reads the SKU to learn whether an earlier attempt landed.
func TestSetStockIfRepeats(t *testing.T) {
	const want = `{"available":15,"expect_available":10,"expect_received":12}`
	seen := client.SKU{SKU: "a", Available: 10, Reserved: 2, Received: 12, FenceToken: 7}
	cases := []struct {
		name    string
		first   func(t *testing.T, w http.ResponseWriter)
		changed bool // the second attempt answers stock_changed
	}{
		{"no answer", noAnswer, false},
		{"store_unavailable", func(_ *testing.T, w http.ResponseWriter) {
			answerError(w, http.StatusServiceUnavailable, "store_unavailable", "0")
		}, false},
		{"timeout", func(_ *testing.T, w http.ResponseWriter) {
			answerError(w, http.StatusServiceUnavailable, "timeout", "0")
		}, false},
		{"lock_unavailable", func(_ *testing.T, w http.ResponseWriter) {
			answerError(w, http.StatusServiceUnavailable, "lock_unavailable", "0")
		}, false},
		{"no answer, then stock_changed", noAnswer, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, n := scripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if body, _ := io.ReadAll(r.Body); string(body) != want {
					t.Errorf("attempt %d sent %s, want %s", n, body, want)
				}
				switch {
				case n == 1:
					tc.first(t, w)
				case tc.changed:
					answerError(w, http.StatusConflict, "stock_changed", "")
				default:
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `{"sku":"a","available":15,"received":15}`)
				}
			})
			c := mustNew(t, url, client.WithInFlightBackoff(time.Millisecond))
			s, err := c.SetStockIf(context.Background(), "a", 15, seen)
			if n.Load() != 2 {
				t.Fatalf("%d attempts, want 2", n.Load())
			}
			if tc.changed {
				var ae *client.APIError
				if !errors.Is(err, client.ErrStockChanged) || !errors.As(err, &ae) || ae.Status != http.StatusConflict {
					t.Fatalf("err = %v, want stock_changed", err)
				}
				return
			}
			if err != nil || s.Available != 15 {
				t.Fatalf("SetStockIf = %+v, %v", s, err)
			}
		})
	}

	for _, c := range []struct {
		name, want string
		call       func(*client.Client) (*client.SKU, error)
	}{
		{"SetStock", `{"available":5}`, func(c *client.Client) (*client.SKU, error) {
			return c.SetStock(context.Background(), "a", 5)
		}},
		{"SetStockIf after a 404", `{"available":5,"expect_available":0,"expect_received":0}`, func(c *client.Client) (*client.SKU, error) {
			return c.SetStockIf(context.Background(), "a", 5, client.SKU{})
		}},
	} {
		url, _ := scripted(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			if body, _ := io.ReadAll(r.Body); string(body) != c.want {
				t.Errorf("%s sent %s, want %s", c.name, body, c.want)
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"sku":"a","available":5,"received":5}`)
		})
		if _, err := c.call(mustNew(t, url)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
}

// TestUnsendableIsFinal: what no attempt could send is refused at once,
// not retried as if it got no answer.
func TestUnsendableIsFinal(t *testing.T) {
	url, n := scripted(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		answerError(w, http.StatusServiceUnavailable, "lock_unavailable", "0")
	})
	var seen attempts
	c := mustNew(t, url, client.WithObserver(seen.observe))
	start := time.Now()
	_, err := c.PlaceOrder(context.Background(), client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}},
		IdempotencyKey: "k\r\n"})
	var ae *client.APIError
	if !errors.Is(err, client.ErrInvalidRequest) || errors.As(err, &ae) || len(seen.list()) != 0 {
		t.Fatalf("key with CR LF = %v after %d attempts, want invalid_request, not sent", err, len(seen.list()))
	}
	if _, err := client.New(url, client.WithAdminToken("s3cret\n")); err == nil {
		t.Fatal("New took an admin token with a newline")
	}
	var v any
	err = c.GetJSON(context.Background(), "/debug/zk-session\n", &v)
	if all := seen.list(); err == nil || len(all) != 1 || all[0].Retry {
		t.Fatalf("a path with a newline = %v, attempts %+v; want one final attempt", err, all)
	}
	if n.Load() != 0 || time.Since(start) > time.Second {
		t.Fatalf("%d requests reached the server in %v", n.Load(), time.Since(start))
	}
}

// TestClientRefusesWhatTheServiceRefuses holds the client's own checks to
// the service's (internal/inventory): the client sends a request exactly
// when the service would not refuse it for its name, key or numbers; what it
// does not send matches ErrInvalidRequest and is no *APIError.
func TestClientRefusesWhatTheServiceRefuses(t *testing.T) {
	url, n := scripted(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		answerError(w, http.StatusBadRequest, "invalid_request", "")
	})
	c := mustNew(t, url, client.WithRetries(0))
	ctx := context.Background()
	check := func(what string, serviceTakes bool, call func() error) {
		t.Helper()
		before := n.Load()
		err := call()
		sent := n.Load() > before
		var ae *client.APIError
		if sent != serviceTakes || !errors.Is(err, client.ErrInvalidRequest) || !sent && errors.As(err, &ae) {
			t.Errorf("%s: sent %v, the service takes it %v; err %v", what, sent, serviceTakes, err)
		}
	}

	for _, sku := range []string{"a", "A9", "widget-1", "gadget:blue", "SKU.2026_04", strings.Repeat("x", 64),
		strings.Repeat("x", 65), "", "-a", ".a", "a/b", "a/audit", "a b", "a%2F", "ä", "a\n", "a*", "a{b}"} {
		takes := inventory.ValidateSKU(sku) == nil
		check(fmt.Sprintf("SKU(%q)", sku), takes, func() error { _, err := c.SKU(ctx, sku); return err })
		check(fmt.Sprintf("Audit(%q)", sku), takes, func() error { _, err := c.Audit(ctx, sku); return err })
		check(fmt.Sprintf("SetStock(%q)", sku), takes, func() error { _, err := c.SetStock(ctx, sku, 1); return err })
	}
	for _, v := range []int64{-1, 0, 1, inventory.MaxStock, inventory.MaxStock + 1, math.MaxInt64} {
		takes := inventory.ValidateStock(v) == nil
		check(fmt.Sprintf("SetStock(%d)", v), takes,
			func() error { _, err := c.SetStock(ctx, "a", v); return err })
		check(fmt.Sprintf("SetStockIf(%d, seen 1)", v), takes,
			func() error { _, err := c.SetStockIf(ctx, "a", v, client.SKU{Available: 1, Received: 1}); return err })
		// What was read may lie past what a PUT sets.
		seenAvailable := client.SKU{Available: v, Received: 1}
		check(fmt.Sprintf("SetStockIf(1, seen available %d)", v), inventory.ValidateExpectation(inventory.StockExpectation{Available: &seenAvailable.Available}) == nil,
			func() error { _, err := c.SetStockIf(ctx, "a", 1, seenAvailable); return err })
		seenReceived := client.SKU{Available: 1, Received: v}
		check(fmt.Sprintf("SetStockIf(1, seen received %d)", v), inventory.ValidateExpectation(inventory.StockExpectation{Received: &seenReceived.Received}) == nil,
			func() error { _, err := c.SetStockIf(ctx, "a", 1, seenReceived); return err })
	}
	for _, k := range []string{"k", "~", " ", strings.Repeat("k", inventory.MaxIdempotency), strings.Repeat("k", inventory.MaxIdempotency+1),
		"k\r\n", "k\x00", "k\x7f", "k\xff", "ключ", "k\t", " k", "k ", "k k"} {
		check(fmt.Sprintf("key %q", k), inventory.ValidateIdempotencyKey(k) == nil,
			func() error { _, err := c.PlaceOrderJSON(ctx, k, oneLine); return err })
	}

	lines := func(n int) []client.Line {
		out := make([]client.Line, n)
		for i := range out {
			out[i] = client.Line{SKU: fmt.Sprintf("s%d", i), Quantity: 1}
		}
		return out
	}
	orders := map[string]client.OrderRequest{
		"one line":           {Lines: lines(1)},
		"no lines":           {},
		"100 lines":          {Lines: lines(inventory.MaxLines)},
		"101 lines":          {Lines: lines(inventory.MaxLines + 1)},
		"a SKU twice":        {Lines: []client.Line{{SKU: "a", Quantity: 1}, {SKU: "a", Quantity: 2}}},
		"a bad SKU":          {Lines: []client.Line{{SKU: "a/b", Quantity: 1}}},
		"quantity 0":         {Lines: []client.Line{{SKU: "a", Quantity: 0}}},
		"quantity -1":        {Lines: []client.Line{{SKU: "a", Quantity: -1}}},
		"quantity max":       {Lines: []client.Line{{SKU: "a", Quantity: inventory.MaxQuantity}}},
		"quantity max+1":     {Lines: []client.Line{{SKU: "a", Quantity: inventory.MaxQuantity + 1}}},
		"hold -1":            {Lines: lines(1), HoldSeconds: -1},
		"hold 1":             {Lines: lines(1), HoldSeconds: 1},
		"hold max":           {Lines: lines(1), HoldSeconds: int(inventory.MaxHold / time.Second)},
		"hold max+1":         {Lines: lines(1), HoldSeconds: int(inventory.MaxHold/time.Second) + 1},
		"hold wraps to 60s":  {Lines: lines(1), HoldSeconds: int(wrapsTo60s)},
		"hold max int":       {Lines: lines(1), HoldSeconds: math.MaxInt},
		"hold min int":       {Lines: lines(1), HoldSeconds: math.MinInt},
		"key with a newline": {Lines: lines(1), IdempotencyKey: "k\n"},
	}
	for name, o := range orders {
		// The service checks hold_seconds as a number before it makes it a
		// duration, which would wrap.
		holdOK := o.HoldSeconds >= 0 && int64(o.HoldSeconds) <= int64(inventory.MaxHold/time.Second)
		req := inventory.PlaceRequest{Hold: time.Duration(o.HoldSeconds) * time.Second, IdempotencyKey: o.IdempotencyKey}
		for _, l := range o.Lines {
			req.Lines = append(req.Lines, inventory.LineRequest{SKU: l.SKU, Quantity: l.Quantity})
		}
		check("order, "+name, holdOK && req.Validate() == nil, func() error { _, err := c.PlaceOrder(ctx, o); return err })
	}
}

// wrapsTo60s is a hold whose product in nanoseconds wraps to exactly 60 s
// (2^55 × 10^9 is a multiple of 2^64).
const wrapsTo60s int64 = 60 + 1<<55

// TestHoldSecondsOverflowNotSent: a hold past the range is refused however
// large, not sent as the hold its nanoseconds wrap to.
func TestHoldSecondsOverflowNotSent(t *testing.T) {
	url, n := scripted(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"order_id":"0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e10","status":"reserved","lines":[]}`)
	})
	c := mustNew(t, url, client.WithRetries(0))
	for _, h := range []int{int(wrapsTo60s), math.MaxInt, math.MinInt, -1, int(inventory.MaxHold/time.Second) + 1} {
		_, err := c.PlaceOrder(context.Background(), client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}}, HoldSeconds: h})
		var ae *client.APIError
		if !errors.Is(err, client.ErrInvalidRequest) || errors.As(err, &ae) || n.Load() != 0 {
			t.Fatalf("hold_seconds %d = %v, %d request(s) sent; want invalid_request, not sent", h, err, n.Load())
		}
	}
}

// TestOrderIDNotSent: an id that is no uuid, the "" of an Order never
// filled in above all, is refused as the caller's invalid input, as the
// other checks refuse theirs, not sent to come back as a 404 of the path.
func TestOrderIDNotSent(t *testing.T) {
	url, n := scripted(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		answerError(w, http.StatusNotFound, "not_found", "")
	})
	c := mustNew(t, url, client.WithRetries(0))
	ctx := context.Background()
	calls := map[string]func(context.Context, string) (*client.Order, error){
		"getOrder": c.Order, "confirmOrder": c.Confirm, "cancelOrder": c.Cancel}
	for op, call := range calls {
		for _, id := range []string{"", "nope", "0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e1", "../skus/a", "0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e10/x"} {
			_, err := call(ctx, id)
			var ae *client.APIError
			if !errors.Is(err, client.ErrInvalidRequest) || errors.As(err, &ae) || !strings.Contains(err.Error(), op) || n.Load() != 0 {
				t.Fatalf("%s(%q) = %v, %d request(s) sent; want invalid_request, not sent", op, id, err, n.Load())
			}
		}
		before := n.Load()
		if _, err := call(ctx, "0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e10"); !errors.Is(err, client.ErrNotFound) || n.Load() != before+1 {
			t.Fatalf("%s of a uuid = %v; want it sent", op, err)
		}
		n.Store(0)
	}
}

// TestKeySpacesAtTheEnds: HTTP drops the spaces at either end of a header
// value, so " cart-7 " would reach the service as another order's
// "cart-7" (422 idempotency_key_reused, or that order replayed), and a key
// of spaces as an empty one. The client refuses them unsent; a space
// inside a key is kept, and is a key of its own.
func TestKeySpacesAtTheEnds(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.newClient(client.WithRetries(0))
	mustStock(t, c, "a", 10)
	if _, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}}, IdempotencyKey: "cart-7"}); err != nil {
		t.Fatal(err)
	}
	sent := len(f.tr.exchanges())
	for _, k := range []string{" cart-7 ", " cart-7", "cart-7 ", " ", "   "} {
		_, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 2}}, IdempotencyKey: k})
		var ae *client.APIError
		if !errors.Is(err, client.ErrInvalidRequest) || errors.As(err, &ae) || len(f.tr.exchanges()) != sent {
			t.Errorf("key %q = %v; want invalid_request, not sent", k, err)
		}
	}
	o, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 2}}, IdempotencyKey: "cart 7"})
	if err != nil || o.Replayed {
		t.Fatalf("key \"cart 7\" = %+v, %v; want an order of its own", o, err)
	}
}

// TestSpecKeyRuleIsTheService: api/openapi.yaml's pattern for the key takes
// exactly the keys the service takes.
func TestSpecKeyRuleIsTheService(t *testing.T) {
	v := specValidator(t)
	for _, k := range []string{"k", "~", "cart 7", "! ~", strings.Repeat("k", inventory.MaxIdempotency),
		"!" + strings.Repeat(" ", inventory.MaxIdempotency-2) + "~", strings.Repeat("k", inventory.MaxIdempotency+1),
		" ", "   ", " k", "k ", " k ", "k\x7f", "ключ"} {
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/v1/orders", strings.NewReader(string(oneLine)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header["Idempotency-Key"] = []string{k}
		specOK, _ := v.ValidateHttpRequest(req)
		if serviceOK := inventory.ValidateIdempotencyKey(k) == nil; specOK != serviceOK {
			t.Errorf("key %q: the spec takes it %v, the service %v", k, specOK, serviceOK)
		}
	}
}

// TestInFlightBackoffFloor: a first backoff of nothing (or less) is the
// default, and one under a millisecond is raised to it: doubled from 0 it
// stays 0, and a key in flight, waited out by time, would be asked after
// thousands of times a second.
func TestInFlightBackoffFloor(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, time.Nanosecond} {
		url, n := scripted(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			answerError(w, http.StatusConflict, "idempotency_key_in_flight", "")
		})
		c := mustNew(t, url, client.WithInFlightBackoff(d), client.WithInFlightWait(300*time.Millisecond))
		if _, err := c.PlaceOrderJSON(context.Background(), "k", oneLine); !errors.Is(err, client.ErrIdempotencyKeyInFlight) {
			t.Fatalf("WithInFlightBackoff(%v): %v, want idempotency_key_in_flight", d, err)
		}
		// From 1 ms doubling: 1+2+…+256 ms spans the 300 ms in 10 attempts.
		if got := n.Load(); got > 12 {
			t.Fatalf("WithInFlightBackoff(%v): %d requests in 300ms, want at most 12", d, got)
		}
	}
}

// TestAttemptTimeoutIsRetried: an attempt cut off by the transport's own
// timeout (here http.Client.Timeout; a dial's is the same) got no answer,
// and is retried while the caller's context lasts, though its error
// matches context.DeadlineExceeded.
func TestAttemptTimeoutIsRetried(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 { // the first attempt meets an instance that hangs
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"lock_unavailable","message":"busy","request_id":"r"}}`))
	}))
	t.Cleanup(srv.Close)
	var seen attempts
	c, err := client.New(srv.URL, client.WithRetries(1), client.WithInFlightBackoff(time.Millisecond),
		client.WithHTTPClient(&http.Client{Timeout: 200 * time.Millisecond}), client.WithObserver(seen.observe))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SKU(context.Background(), "a")
	all := seen.list()
	if !errors.Is(err, client.ErrLockUnavailable) || len(all) != 2 || !all[0].Retry || all[0].Status != 0 {
		t.Fatalf("err %v, attempts %+v; want the timed-out attempt retried, then the 503", err, all)
	}
}

// TestRetryAfterBeyondDurations: a Retry-After too large for a Duration
// reads as the longest one, not as a product that wrapped (290 ms, or
// negative).
func TestRetryAfterBeyondDurations(t *testing.T) {
	for _, v := range []string{"18446744074", "9999999999", "99999999999999"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", v)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"lock_unavailable","message":"busy","request_id":"r"}}`))
		}))
		c, err := client.New(srv.URL, client.WithRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.SKU(context.Background(), "a")
		srv.Close()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.RetryAfter < 100*365*24*time.Hour {
			t.Fatalf("Retry-After %s: %v, RetryAfter %v; want centuries", v, err, ae.RetryAfter)
		}
	}
}

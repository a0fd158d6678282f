package client_test

// Tests of what PlaceOrder tells of a replay, and of the key it leaves the
// caller after an unknown outcome: against the real service, with answers
// lost on the way back, and against scripted servers for each kind of
// first answer.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/client"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/reservation"
)

// losingTransport loses the answers to the next lose order requests after
// the service has handled them: a connection cut on the way back, or a
// proxy that timed out the request.
type losingTransport struct {
	next http.RoundTripper
	lose atomic.Int32
}

func (lt *losingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := lt.next.RoundTrip(req)
	if err != nil || req.URL.Path != "/v1/orders" || lt.lose.Add(-1) < 0 {
		return res, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return nil, errors.New("answer lost on the way back")
}

// losing is a client of f whose next n order answers are lost.
func (f *fixture) losing(n int32, opts ...client.Option) *client.Client {
	lt := &losingTransport{next: f.tr}
	lt.lose.Store(n)
	return f.newClient(append([]client.Option{client.WithHTTPClient(&http.Client{Transport: lt}),
		client.WithInFlightBackoff(time.Millisecond)}, opts...)...)
}

// TestReplayedOnlyWhenKnown: the only call that placed an order is never
// told the order existed before it. Its first attempt places the order and
// the answer is lost; the retry is answered with a replay, which the call
// cannot tell from one of an earlier call's order.
func TestReplayedOnlyWhenKnown(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	mustStock(t, f.newClient(), "a", 10)
	one := []client.Line{{SKU: "a", Quantity: 1}}

	key := client.NewIdempotencyKey()
	o, err := f.losing(1).PlaceOrder(ctx, client.OrderRequest{Lines: one, IdempotencyKey: key})
	if err != nil || o.Replayed || !o.ReplayedAfterLostAnswer {
		t.Fatalf("the call that placed it, its answer lost = %+v, %v; want Replayed false, ReplayedAfterLostAnswer true", o, err)
	}
	again, err := f.newClient().PlaceOrder(ctx, client.OrderRequest{Lines: one, IdempotencyKey: key})
	if err != nil || !again.Replayed || again.ReplayedAfterLostAnswer || again.ID != o.ID {
		t.Fatalf("a second call = %+v, %v; want order %s, Replayed", again, err, o.ID)
	}

	made, err := f.losing(1).PlaceOrder(ctx, client.OrderRequest{Lines: one})
	if err != nil || made.Replayed || made.ReplayedAfterLostAnswer || made.ID == o.ID {
		t.Fatalf("with a key PlaceOrder made, the answer lost = %+v, %v; want a new order, neither flag", made, err)
	}
	if a, err := f.newClient().Audit(ctx, "a"); err != nil || a.Held != 2 || !a.Consistent {
		t.Fatalf("audit %+v, %v: want two orders of one unit", a, err)
	}
}

// dropFirstOrderAnswer stands between the client and the real service and
// loses the answer to the first POST /v1/orders after the service placed
// the order: the connection closes without a byte of answer, as when an
// instance or a load balancer dies right after the commit. Everything else
// is passed through.
type dropFirstOrderAnswer struct {
	upstream *url.URL
	proxy    *httputil.ReverseProxy
	dropped  atomic.Bool
	// placed is the service's status for the order whose answer was lost.
	placed atomic.Int32
}

func (d *dropFirstOrderAnswer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/orders" || !d.dropped.CompareAndSwap(false, true) {
		d.proxy.ServeHTTP(w, r)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = d.upstream.Scheme, d.upstream.Host, d.upstream.Host
	if res, err := http.DefaultTransport.RoundTrip(out); err == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if res.Header.Get("Idempotent-Replayed") == "" {
			d.placed.Store(int32(res.StatusCode))
		}
	}
	panic(http.ErrAbortHandler)
}

// TestTransportNeverResendsAnOrder: net/http's Transport takes an
// Idempotency-Key as leave to resend a POST whose answer a reused
// keep-alive connection lost. Were it to, the client's retries would never
// see the lost send that placed the order, and would report the resend's
// replay as an earlier call's order (Replayed), whose follow-ups the caller
// skips. The loss must reach the client: its Observer sees it, and the
// replay reads as ReplayedAfterLostAnswer.
func TestTransportNeverResendsAnOrder(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mustStock(t, f.newClient(), "a", 10)
	up, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	d := &dropFirstOrderAnswer{upstream: up, proxy: httputil.NewSingleHostReverseProxy(up)}
	front := httptest.NewServer(d)
	t.Cleanup(front.Close)

	var seen attempts
	c := mustNew(t, front.URL, client.WithObserver(seen.observe), client.WithInFlightBackoff(time.Millisecond))
	// An earlier call leaves a connection in the pool for the order to
	// reuse: the Transport resends only on a reused one.
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	key := client.NewIdempotencyKey()
	o, err := c.PlaceOrder(ctx, client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}}, IdempotencyKey: key})
	if d.placed.Load() != http.StatusCreated {
		t.Fatalf("setup: the lost answer was not the one that placed the order (%d)", d.placed.Load())
	}
	if err != nil || o.Replayed || !o.ReplayedAfterLostAnswer {
		t.Fatalf("PlaceOrder, its first send placing the order = %+v, %v; want Replayed false, ReplayedAfterLostAnswer true", o, err)
	}
	var orders []client.Attempt
	for _, at := range seen.list() {
		if at.Op == "placeOrder" {
			orders = append(orders, at)
		}
	}
	if len(orders) != 2 || orders[0].Status != 0 || orders[0].Err == nil || !orders[0].Retry || orders[1].Status != http.StatusCreated {
		t.Fatalf("order attempts the observer saw = %+v; want the lost one, then the 201", orders)
	}
	if a, err := f.newClient().Audit(ctx, "a"); err != nil || a.Held != 1 {
		t.Fatalf("audit %+v, %v: want the order placed once", a, err)
	}
}

// TestReplayedByFirstAnswer: after each first answer the client retries, a
// replay reads as an earlier call's order only when that answer said
// nothing was written.
func TestReplayedByFirstAnswer(t *testing.T) {
	answer := func(status int, code string) func(*testing.T, http.ResponseWriter) {
		return func(_ *testing.T, w http.ResponseWriter) { answerError(w, status, code, "0") }
	}
	cases := []struct {
		name         string
		first        func(*testing.T, http.ResponseWriter)
		replayed     bool // the order existed before the call
		afterLostAns bool
	}{
		{"no answer", noAnswer, false, true},
		{"store_unavailable", answer(http.StatusServiceUnavailable, "store_unavailable"), false, true},
		{"timeout", answer(http.StatusServiceUnavailable, "timeout"), false, true},
		{"a 201 unread", func(_ *testing.T, w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `<html>proxy page</html>`)
		}, false, true},
		{"a 201 without an order", func(_ *testing.T, w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{}`)
		}, false, true},
		{"lock_unavailable", answer(http.StatusServiceUnavailable, "lock_unavailable"), true, false},
		{"overloaded", answer(http.StatusServiceUnavailable, "overloaded"), true, false},
		{"idempotency_key_in_flight", answer(http.StatusConflict, "idempotency_key_in_flight"), true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, n := scripted(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				if n == 1 {
					tc.first(t, w)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Idempotent-Replayed", "true")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprint(w, `{"order_id":"0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e10","status":"reserved","lines":[]}`)
			})
			c := mustNew(t, url, client.WithInFlightBackoff(time.Millisecond))
			o, err := c.PlaceOrderJSON(context.Background(), "k", oneLine)
			if err != nil || n.Load() != 2 || o.Replayed != tc.replayed || o.ReplayedAfterLostAnswer != tc.afterLostAns {
				t.Fatalf("%+v, %v after %d attempts; want Replayed %v, ReplayedAfterLostAnswer %v",
					o, err, n.Load(), tc.replayed, tc.afterLostAns)
			}
		})
	}
}

// TestKeyOfUnknownOutcome: a call that made its own key and ended without
// a settling answer leaves that key in its error, and placing the order
// again under it answers with the order the lost attempts placed.
func TestKeyOfUnknownOutcome(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	mustStock(t, f.newClient(), "a", 10)
	req := client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 3}}}
	_, err := f.losing(2, client.WithRetries(1)).PlaceOrder(ctx, req)
	key := client.IdempotencyKeyOf(err)
	if !errors.Is(err, client.ErrOutcomeUnknown) || key == "" {
		t.Fatalf("every answer lost = %v, key %q; want an unknown outcome that carries the key", err, key)
	}
	for _, x := range f.tr.exchanges() {
		if x.path == "/v1/orders" && x.idempotencyKey != key {
			t.Fatalf("attempt sent key %q, the error says %q", x.idempotencyKey, key)
		}
	}
	req.IdempotencyKey = key
	o, err := f.newClient().PlaceOrder(ctx, req)
	if err != nil || !o.Replayed {
		t.Fatalf("placed again under the key = %+v, %v; want the order the lost attempts placed", o, err)
	}
	if a, err := f.newClient().Audit(ctx, "a"); err != nil || a.Held != 3 {
		t.Fatalf("audit %+v, %v: want the order placed once", a, err)
	}

	// The key is there however the call ends: out of retries, out of time,
	// or refused; a call never sent has none.
	url, _ := scripted(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		answerError(w, http.StatusConflict, "idempotency_key_in_flight", "")
	})
	c := mustNew(t, url, client.WithInFlightBackoff(time.Millisecond), client.WithInFlightWait(20*time.Millisecond))
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = mustNew(t, url, client.WithInFlightBackoff(time.Millisecond)).PlaceOrderJSON(short, "", oneLine)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrIdempotencyKeyInFlight) ||
		!errors.Is(err, client.ErrOutcomeUnknown) || client.IdempotencyKeyOf(err) == "" {
		t.Fatalf("out of time = %v, key %q; want the deadline, the 409, an unknown outcome and the key", err, client.IdempotencyKeyOf(err))
	}
	if _, err := c.PlaceOrderJSON(ctx, "mine", oneLine); client.IdempotencyKeyOf(err) != "mine" {
		t.Fatalf("with the caller's key = %v, key %q", err, client.IdempotencyKeyOf(err))
	}
	if _, err := c.PlaceOrder(ctx, client.OrderRequest{}); err == nil || client.IdempotencyKeyOf(err) != "" {
		t.Fatalf("an order never sent = %v, key %q; want no key", err, client.IdempotencyKeyOf(err))
	}
	if k := client.IdempotencyKeyOf(nil); k != "" {
		t.Fatalf("IdempotencyKeyOf(nil) = %q", k)
	}
}

// TestLostAnswerThenShedIsUnknown: the first attempt places the order and
// its answer is lost; every retry is answered 503 overloaded, which the
// service sends before it looks the key up. That answer says only that the
// retry wrote nothing: the call's error is an unknown outcome (still the
// 503, and carrying the key), not the "nothing written" that overloaded
// alone means, and placing the order again under the key answers with the
// order the lost attempt placed.
func TestLostAnswerThenShedIsUnknown(t *testing.T) {
	// One request at a time, and a lock wait long enough for a blocked
	// order to keep that slot through every retry.
	f := newFixture(t, func(rc *reservation.Config, hc *httpapi.Config) {
		hc.MaxInFlight, rc.LockWait = 1, 3*time.Second
	})
	ctx := context.Background()
	admin := f.newClient()
	mustStock(t, admin, "a", 10)
	mustStock(t, admin, "b", 10)
	release := f.hold("b")
	probe := f.newClient(client.WithRetries(0))
	blocked := make(chan struct{})
	lt := &landedTransport{next: f.tr, method: http.MethodPost, between: func() {
		// An order of b waits for the lock the test holds, in the only
		// slot; sent again if a probe had the slot when it came.
		go func() {
			defer close(blocked)
			for {
				res, raw := f.raw(http.MethodPost, "/v1/orders", `{"lines":[{"sku":"b","quantity":1}]}`)
				if res == nil || !bytes.Contains(raw, []byte(`"overloaded"`)) {
					return
				}
			}
		}()
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, err := probe.SKU(ctx, "a"); errors.Is(err, client.ErrOverloaded) {
				return // the slot is taken
			}
			if time.Now().After(deadline) {
				t.Error("the blocked order never took the slot")
				return
			}
		}
	}}
	c := f.newClient(client.WithHTTPClient(&http.Client{Transport: lt}), client.WithRetries(3),
		client.WithMaxRetryWait(20*time.Millisecond), client.WithInFlightBackoff(time.Millisecond))
	req := client.OrderRequest{Lines: []client.Line{{SKU: "a", Quantity: 1}}, IdempotencyKey: client.NewIdempotencyKey()}
	_, err := c.PlaceOrder(ctx, req)
	release()
	<-blocked
	var ae *client.APIError
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, client.ErrOverloaded) || !errors.As(err, &ae) ||
		client.IdempotencyKeyOf(err) != req.IdempotencyKey || !strings.Contains(err.Error(), "4 attempts: outcome unknown") {
		t.Fatalf("lost, then shed = %v, key %q; want an unknown outcome after 4 attempts, the 503 overloaded and the key",
			err, client.IdempotencyKeyOf(err))
	}
	if a, err := admin.Audit(ctx, "a"); err != nil || a.Held != 1 {
		t.Fatalf("audit %+v, %v: want the lost attempt's order held", a, err)
	}
	req.IdempotencyKey = client.IdempotencyKeyOf(err)
	o, err := admin.PlaceOrder(ctx, req)
	if err != nil || !o.Replayed {
		t.Fatalf("placed again under the key = %+v, %v; want the order the lost attempt placed", o, err)
	}
	if a, err := admin.Audit(ctx, "a"); err != nil || a.Held != 1 {
		t.Fatalf("audit %+v, %v: want the order placed once", a, err)
	}
}

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/inventory"
)

// bigOrders answers every order read, confirm and cancel with one order of
// 100 lines (≈ 12 KB of JSON): more than net/http buffers of an answer.
type bigOrders struct {
	recorder
	order *inventory.Order
}

func newBigOrders() *bigOrders {
	o := &inventory.Order{ID: uuid.New(), Status: inventory.StatusReserved, ExpiresAt: time.Now()}
	for i := range inventory.MaxLines {
		o.Lines = append(o.Lines, inventory.Line{SKU: fmt.Sprintf("%064d", i), Quantity: 1_000_000, FenceToken: 1 << 62})
	}
	return &bigOrders{order: o}
}

func (b *bigOrders) Order(context.Context, string) (*inventory.Order, error) {
	b.calls.Add(1)
	return b.order, nil
}

func (b *bigOrders) Confirm(context.Context, string) (*inventory.Order, error) {
	b.calls.Add(1)
	return b.order, nil
}

// fullWindows serves connections whose clients read nothing: the first
// few KiB of answers written to each go through, then every write waits,
// as on a socket whose peer's receive window is full, until the test opens
// the windows (or the connection is closed).
type fullWindows struct {
	net.Listener
	open chan struct{}
}

func (l fullWindows) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &fullWindow{Conn: c, left: 4096, open: l.open, closed: make(chan struct{})}, nil
}

type fullWindow struct {
	net.Conn
	left   int // bytes that go through before the window is full
	open   chan struct{}
	once   sync.Once
	closed chan struct{}
}

func (c *fullWindow) Write(p []byte) (int, error) {
	n := 0
	if c.left > 0 {
		var err error
		n, err = c.Conn.Write(p[:min(len(p), c.left)])
		c.left -= n
		if err != nil || n == len(p) {
			return n, err
		}
	}
	select {
	case <-c.open:
	case <-c.closed:
		return n, net.ErrClosed
	}
	m, err := c.Conn.Write(p[n:])
	return n + m, err
}

func (c *fullWindow) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// settled waits until n stops moving (for 300 ms), at most 5 s.
func settled(t *testing.T, n func() int32) int32 {
	t.Helper()
	last, since := n(), time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if v := n(); v != last {
			last, since = v, time.Now()
		} else if v > 0 && time.Since(since) > 300*time.Millisecond {
			return v
		}
	}
	t.Fatalf("calls never settled (%d)", last)
	return 0
}

// TestUnreadAnswersHoldNoSlot: a client that never reads its answers
// holds its connection, not an in-flight slot or body budget: they bound
// the work, and an answer goes to the socket once they are freed. Two such
// clients pipeline requests with bodies whose answers (an order of 100
// lines, 12 KB) fill their windows; with MaxInFlight 1 an order with a
// body still gets through, and the stuck answers are whole once read.
func TestUnreadAnswersHoldNoSlot(t *testing.T) {
	svc := newBigOrders()
	srv := httptest.NewUnstartedServer(httpapi.New(httpapi.Config{Service: svc, MaxInFlight: 1}))
	windows := fullWindows{Listener: srv.Listener, open: make(chan struct{})}
	srv.Listener = windows
	srv.Start()
	t.Cleanup(srv.Close)
	var opened sync.Once
	openWindows := func() { opened.Do(func() { close(windows.open) }) }
	t.Cleanup(openWindows) // before Close, which waits for the stuck answers
	addr := srv.Listener.Addr().String()
	confirm := "POST /v1/orders/" + orderID + "/confirm HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	var hogs []*rawConn
	for range 2 {
		c := dialRaw(t, addr)
		c.send(strings.Repeat(confirm, 50)) // and read nothing
		hogs = append(hogs, c)
	}
	settled(t, func() int32 { return svc.calls.Load() })
	c := dialRaw(t, addr)
	c.send("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		fmt.Sprint(len(oneLine)) + "\r\n\r\n" + oneLine)
	if a, ok := c.answer(2 * time.Second); !ok || a.status != http.StatusCreated {
		t.Errorf("an order while 2 clients leave their answers unread = %v %d %q %s; want 201", ok, a.status, a.code, a.msg)
	}
	openWindows()
	orders := 0
	for _, h := range hogs { // every request answered, whole: 503 overloaded while the other held the slot
		for i := range 50 {
			_ = h.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			res, err := http.ReadResponse(h.r, nil)
			if err != nil {
				t.Fatalf("answer %d of a client that did not read: %v", i, err)
			}
			var o inventory.Order
			err = json.NewDecoder(res.Body).Decode(&o)
			_ = res.Body.Close()
			switch {
			case res.StatusCode == http.StatusOK && err == nil && len(o.Lines) == inventory.MaxLines:
				orders++
			case res.StatusCode != http.StatusServiceUnavailable:
				t.Fatalf("answer %d of a client that did not read = %d, %d lines, %v", i, res.StatusCode, len(o.Lines), err)
			}
		}
	}
	if orders == 0 {
		t.Fatal("no order was answered")
	}
}

// TestShedsAreNotErrors: a request refused 503 overloaded is the bound at
// work, not a fault: a flood of them is not a flood of ERROR lines, only
// one WARN line at most every few seconds that counts them.
func TestShedsAreNotErrors(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	svc := &recorder{place: func(context.Context, inventory.PlaceRequest) (*inventory.Order, bool, error) {
		entered <- struct{}{}
		<-release
		return &inventory.Order{ID: uuid.New()}, false, nil
	}}
	var log syncBuffer
	h := httpapi.New(httpapi.Config{Service: svc, MaxInFlight: 1, Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	done := make(chan struct{})
	go func() {
		defer close(done)
		hostileReq{"POST", "/v1/orders", oneLine, nil}.serve(h)
	}()
	<-entered
	for range 50 {
		if w := (hostileReq{"GET", "/v1/orders/" + orderID, "", nil}).serve(h); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("over the bound = %d", w.Code)
		}
	}
	close(release)
	<-done
	var errs, warns int
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		switch {
		case strings.Contains(l, `"level":"ERROR"`):
			errs++
		case strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "overloaded"):
			warns++
		}
	}
	if errs != 0 || warns != 1 {
		t.Fatalf("50 requests shed: %d ERROR lines and %d WARN lines, want 0 and 1:\n%.600s", errs, warns, log.String())
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTransferEncodingClosesTheConnection: a request sent with
// Transfer-Encoding is answered with Connection: close on every route
// (RFC 9112 §6.1: one with Content-Length too may have been framed by the
// length in front of the service, and what follows it on the wire is not
// a request to trust); the request pipelined after it is not served.
func TestTransferEncodingClosesTheConnection(t *testing.T) {
	svc := &recorder{}
	addr := listen(t, httpapi.Config{Service: svc}, 5*time.Second)
	chunked := func(b string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(b), b) }
	next := "GET /v1/orders/" + orderID + " HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name, head, body string
		status           int
	}{
		{"order", "POST /v1/orders HTTP/1.1\r\nContent-Type: application/json\r\n", chunked(oneLine), http.StatusCreated},
		{"confirm", "POST /v1/orders/" + orderID + "/confirm HTTP/1.1\r\n", chunked("{}"), http.StatusOK},
		{"healthz", "GET /healthz HTTP/1.1\r\n", "0\r\n\r\n", http.StatusOK},
		{"unknown path", "POST /nowhere HTTP/1.1\r\n", "0\r\n\r\n", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := svc.calls.Load()
			c := dialRaw(t, addr)
			c.send(tc.head + "Host: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + tc.body + next)
			a, ok := c.answer(2 * time.Second)
			if !ok || a.status != tc.status || !a.closedAfter {
				t.Fatalf("answer = %v %d %q, Connection: close %v; want %d with Connection: close", ok, a.status, a.code, a.closedAfter, tc.status)
			}
			if b, ok := c.answer(time.Second); ok {
				t.Fatalf("the request after it was served: %d", b.status)
			}
			if n := svc.calls.Load() - before; n > 1 {
				t.Fatalf("%d calls reached the service", n)
			}
		})
	}
}

// TestBodyOnRoutesThatReadNone: the routes that read no body (probes,
// /metrics, unknown paths and methods) answer at once whatever body is
// declared: 413 over 64 KiB, else their answer with Connection: close,
// the body left unread; neither waits for the body to come.
func TestBodyOnRoutesThatReadNone(t *testing.T) {
	svc := &recorder{}
	addr := listen(t, httpapi.Config{Service: svc, Gatherer: noMetrics{}}, 5*time.Second)
	for _, tc := range []struct {
		req    string
		status int
	}{
		{"GET /healthz", http.StatusOK},
		{"GET /readyz", http.StatusOK},
		{"GET /metrics", http.StatusOK},
		{"GET /nowhere", http.StatusNotFound},
		{"DELETE /healthz", http.StatusMethodNotAllowed},
	} {
		for _, length := range []int{200_000, 100} {
			want := tc.status
			if length > 64<<10 {
				want = http.StatusRequestEntityTooLarge
			}
			c := dialRaw(t, addr)
			start := time.Now()
			c.send(fmt.Sprintf("%s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", tc.req, length))
			a, ok := c.answer(2 * time.Second)
			if !ok || a.status != want || !a.closedAfter {
				t.Errorf("%s with %d bytes declared, none sent = %v %d %q, Connection: close %v, after %s; want %d at once with Connection: close",
					tc.req, length, ok, a.status, a.code, a.closedAfter, time.Since(start).Round(time.Millisecond), want)
			}
		}
	}
}

// TestHTTP10ClosesTheConnection: Go's server deletes the
// Transfer-Encoding of an HTTP/1.0 request before the handler sees it and
// frames the body by its Content-Length, where a proxy that honours the
// chunks frames it otherwise (RFC 9112 §6.1: faultily framed). So every
// HTTP/1.0 request is answered with Connection: close, keep-alive asked or
// not, and what follows it on the wire is not served.
func TestHTTP10ClosesTheConnection(t *testing.T) {
	svc := &recorder{}
	addr := listen(t, httpapi.Config{Service: svc}, 5*time.Second)
	next := "GET /v1/orders/" + orderID + " HTTP/1.0\r\n\r\n"
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"order, chunked", fmt.Sprintf("POST /v1/orders HTTP/1.0\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"+
			"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n%s", len(oneLine), oneLine), http.StatusCreated},
		{"healthz, chunked", "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n", http.StatusOK},
		{"healthz", "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, addr)
			c.send(tc.req + next)
			a, ok := c.answer(2 * time.Second)
			if !ok || a.status != tc.status || a.header.Get("Connection") != "close" {
				t.Fatalf("answer = %v %d %q, Connection %q; want %d with Connection: close", ok, a.status, a.code, a.header.Get("Connection"), tc.status)
			}
			if b, ok := c.answer(time.Second); ok {
				t.Fatalf("the request after it was served: %d", b.status)
			}
		})
	}
}

// TestUnreadBodyConnectionEnds: after an answer over a body left unread
// (a route that reads none, or a refusal before the body), the connection
// closes cleanly: once the body is in, at once; a body that never comes,
// at the read timeout (net/http reads and drops up to 256 KiB of it after
// the answer: a close over bytes still arriving would reset the
// connection, which can take the answer with it).
func TestUnreadBodyConnectionEnds(t *testing.T) {
	const readTimeout = 2 * time.Second
	addr := listen(t, httpapi.Config{Service: &recorder{}, Gatherer: noMetrics{}, AdminToken: "s3cret"}, readTimeout)
	for _, tc := range []struct {
		name, head string
		length     int
		status     int
	}{
		{"probe", "GET /healthz HTTP/1.1\r\n", 100, http.StatusOK},
		{"unknown path", "GET /nowhere HTTP/1.1\r\n", 100, http.StatusNotFound},
		{"no admin token", "PUT /v1/skus/a HTTP/1.1\r\nContent-Type: application/json\r\n", 100, http.StatusUnauthorized},
		{"not JSON", "POST /v1/orders HTTP/1.1\r\nContent-Type: text/plain\r\n", 100, http.StatusUnsupportedMediaType},
		{"declared too large", "POST /v1/orders HTTP/1.1\r\nContent-Type: application/json\r\n", 100_000, http.StatusRequestEntityTooLarge},
	} {
		for _, sent := range []bool{false, true} {
			c := dialRaw(t, addr)
			req := fmt.Sprintf("%sHost: x\r\nContent-Length: %d\r\n\r\n", tc.head, tc.length)
			if sent {
				req += strings.Repeat("b", tc.length)
			}
			start := time.Now()
			c.send(req)
			a, ok := c.answer(time.Second)
			if !ok || a.status != tc.status || !a.closedAfter {
				t.Fatalf("%s (body sent %v) = %v %d %q, Connection: close %v; want %d with Connection: close",
					tc.name, sent, ok, a.status, a.code, a.closedAfter, tc.status)
			}
			_ = c.conn.SetReadDeadline(time.Now().Add(2 * readTimeout))
			_, err := c.r.ReadByte()
			took := time.Since(start)
			switch {
			case took > readTimeout+time.Second:
				t.Errorf("%s (body sent %v): the connection ended %s after the request; want by the %s read timeout",
					tc.name, sent, took.Round(time.Millisecond), readTimeout)
			case !errors.Is(err, io.EOF):
				t.Errorf("%s (body sent %v): the connection ended with %v, want a clean close (EOF)", tc.name, sent, err)
			}
		}
	}
}

// TestSlowUploadOfARefusedBodyGetsItsAnswer: a client on a slow uplink sends a
// 40 KB body, refused 415 at once, over about 2 s, reading the answer once
// its upload ends (as a client that writes the whole request before it
// reads does). The server reads and drops the rest of the body before it
// closes; a read cut 0.5 s after the refusal closed over the bytes still
// coming, and the connection was reset under the client's upload.
func TestSlowUploadOfARefusedBodyGetsItsAnswer(t *testing.T) {
	addr := listen(t, httpapi.Config{Service: &recorder{}}, 10*time.Second)
	const chunks, size = 10, 4000
	c := dialRaw(t, addr)
	c.send(fmt.Sprintf("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", chunks*size))
	start := time.Now()
	var werr error
	var at time.Duration
	for i := 0; i < chunks && werr == nil; i++ {
		time.Sleep(200 * time.Millisecond)
		_, werr = io.WriteString(c.conn, strings.Repeat("b", size))
		at = time.Since(start)
	}
	a, ok := c.answer(2 * time.Second)
	if werr != nil {
		t.Errorf("upload of the refused body broke %v after the headers: %v (answer read after it: ok=%v status=%d)",
			at.Round(time.Millisecond), werr, ok, a.status)
	}
	if !ok || a.status != http.StatusUnsupportedMediaType {
		t.Errorf("answer = ok %v, status %d; want 415", ok, a.status)
	}
}

// noMetrics is a gatherer with nothing to say.
type noMetrics struct{}

func (noMetrics) Gather() ([]*dto.MetricFamily, error) { return nil, nil }

// TestDuplicatedHeaders: a header the API decides on, sent twice, is not
// left to the first value (which one counts would be up to every proxy on
// the way): Authorization and Content-Type are refused 400 before the
// service is reached; two X-Request-Id are none, and the answer gets a
// fresh id.
func TestDuplicatedHeaders(t *testing.T) {
	svc := &recorder{}
	h := httpapi.New(httpapi.Config{Service: svc, AdminToken: "s3cret"})
	for _, q := range []hostileReq{
		{"PUT", "/v1/skus/a", `{"available":1}`, http.Header{"Authorization": {"Bearer s3cret", "Basic eDp5"}}},
		{"PUT", "/v1/skus/a", `{"available":1}`, http.Header{"Authorization": {"Basic eDp5", "Bearer s3cret"}}},
		{"POST", "/v1/orders", oneLine, http.Header{"Content-Type": {"application/json", "text/plain"}}},
		{"PUT", "/v1/skus/a", `{"available":1}`, http.Header{"Authorization": {"Bearer s3cret"}, "Content-Type": {"application/json", "application/json"}}},
	} {
		w := q.serve(h)
		if code := errorCode(t, w); w.Code != http.StatusBadRequest || code != "invalid_request" {
			t.Errorf("%s %s with %v = %d %q, want 400 invalid_request", q.method, q.path, q.header, w.Code, code)
		}
	}
	if n := svc.calls.Load(); n != 0 {
		t.Errorf("%d call(s) reached the service", n)
	}
	w := hostileReq{"GET", "/healthz", "", http.Header{"X-Request-Id": {"first", "second"}}}.serve(h)
	if id := w.Header().Get("X-Request-Id"); uuid.Validate(id) != nil {
		t.Errorf("two X-Request-Id answered with id %q, want a fresh UUID", id)
	}
}

// TestChaosHeaderIsClipped: a bad X-Chaos-Pause or X-Chaos-Stall is
// refused without being echoed whole, like every other value a client sends.
func TestChaosHeaderIsClipped(t *testing.T) {
	h := httpapi.New(httpapi.Config{Service: &recorder{}, Chaos: true})
	for _, name := range []string{"X-Chaos-Pause", "X-Chaos-Stall"} {
		w := hostileReq{"POST", "/v1/orders", oneLine, http.Header{name: {strings.Repeat("9", 15_000)}}}.serve(h)
		if code := errorCode(t, w); w.Code != http.StatusBadRequest || code != "invalid_request" || w.Body.Len() > 1024 {
			t.Errorf("a 15,000-byte %s = %d %q, %d bytes; want 400 invalid_request under 1 KB", name, w.Code, code, w.Body.Len())
		}
	}
}

// TestChaosHeadersIgnoredWithoutChaos: without --chaos, X-Chaos-Pause and
// X-Chaos-Stall are ignored, well formed or not: no client can stall a
// production critical section with the locks held, or have an order
// refused for a header the service does not serve. The service is the
// real one, whose critical section is where a pause would sleep.
func TestChaosHeadersIgnoredWithoutChaos(t *testing.T) {
	e := newEnvChaos(t, false)
	e.stock("a", 10)
	headers := [][]string{
		{"X-Chaos-Pause", "2s"},
		{"X-Chaos-Stall", "2s"},
		{"X-Chaos-Pause", "garbage"},
		{"X-Chaos-Stall", "garbage"},
		{"X-Chaos-Pause", "2s", "X-Chaos-Stall", "2s"},
	}
	for _, h := range headers {
		start := time.Now()
		r := e.order(`{"lines":[{"sku":"a","quantity":1}]}`, h...)
		// Well under the pause: a loaded machine is slow, never 2 s slow
		// for one order on the local lock.
		if took := time.Since(start); r.status != http.StatusCreated || took > time.Second {
			t.Errorf("order with %q without --chaos = %d after %v, want 201 at once: %s", h, r.status, took, r.raw)
		}
	}
	if a := e.audit("a"); a.Held != int64(len(headers)) || !a.Consistent {
		t.Fatalf("audit after %d orders = %+v", len(headers), a)
	}
}

// slowGatherer holds every scrape until released.
type slowGatherer struct{ entered, release chan struct{} }

func (g slowGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.entered <- struct{}{}
	<-g.release
	return nil, nil
}

// TestMetricsAreBounded: /metrics is outside the API's in-flight bound,
// not outside every bound: a few scrapes run at once, and one more is
// answered 503 overloaded at once, with Retry-After.
func TestMetricsAreBounded(t *testing.T) {
	g := slowGatherer{entered: make(chan struct{}, 16), release: make(chan struct{})}
	h := httpapi.New(httpapi.Config{Service: &recorder{}, Gatherer: g})
	var wg sync.WaitGroup
	defer wg.Wait()
	released := false
	release := func() {
		if !released {
			released = true
			close(g.release)
		}
	}
	defer release()
	for range httpapi.MetricsInFlight {
		wg.Go(func() {
			if w := (hostileReq{"GET", "/metrics", "", nil}).serve(h); w.Code != http.StatusOK {
				t.Errorf("a scrape within the bound = %d", w.Code)
			}
		})
		<-g.entered
	}
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() { answered <- hostileReq{"GET", "/metrics", "", nil}.serve(h) }()
	select {
	case w := <-answered:
		if code := errorCode(t, w); w.Code != http.StatusServiceUnavailable || code != "overloaded" || w.Header().Get("Retry-After") == "" {
			t.Errorf("a scrape over the bound = %d %q, Retry-After %q", w.Code, code, w.Header().Get("Retry-After"))
		}
	case <-g.entered:
		t.Errorf("%d scrapes ran at once", httpapi.MetricsInFlight+1)
		release()
		<-answered
	case <-time.After(2 * time.Second):
		t.Error("a scrape over the bound is not answered")
	}
}

package httpapi_test

import (
	"bufio"
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
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
)

// The tests below speak HTTP/1.1 over raw sockets to a real listener:
// what they check (connection reuse, 100 Continue, what is read of a body
// and when) lives in net/http's server, which a ResponseRecorder skips.

const orderID = "0f8c6f0e-6f3e-4d1a-9a57-3c4f1d2b7e10"

// listen serves c on a real listener with the given read timeout.
func listen(t *testing.T, c httpapi.Config, readTimeout time.Duration) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(httpapi.New(c))
	srv.Config.ReadTimeout = readTimeout
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// rawConn is a client connection that reads answers one at a time.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{t: t, conn: c, r: bufio.NewReader(c)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, s); err != nil {
		c.t.Fatal(err)
	}
}

// rawAnswer is one answer read off the wire.
type rawAnswer struct {
	status      int
	header      http.Header
	code, msg   string
	closedAfter bool // the server said Connection: close
}

// answer reads the next answer within d; ok is false when none came (the
// connection was closed, or nothing arrived within d).
func (c *rawConn) answer(d time.Duration) (rawAnswer, bool) {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return rawAnswer{}, false
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatalf("reading the answer's body: %v", err)
	}
	a := rawAnswer{status: res.StatusCode, header: res.Header, closedAfter: res.Close}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		a.code, a.msg = e.Error.Code, e.Error.Message
	}
	return a, true
}

// closed reports whether the server closed the connection within d with
// nothing more to say.
func (c *rawConn) closed(d time.Duration) bool {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	n, err := c.r.Read(make([]byte, 1))
	return n == 0 && err != nil && !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestMalformedTrailerSmugglesNothing: a chunked body whose trailer is
// malformed is answered 400 and the connection closed; the bytes after the
// bad trailer are never served as a request of their own (once they were:
// net/http kept the connection when the handler had swapped its body).
func TestMalformedTrailerSmugglesNothing(t *testing.T) {
	svc := &recorder{}
	addr := listen(t, httpapi.Config{Service: svc, AdminToken: "s3cret"}, 5*time.Second)
	for _, route := range []string{"/v1/orders", "/v1/orders/" + orderID + "/confirm"} {
		before := svc.calls.Load()
		c := dialRaw(t, addr)
		smuggled := "PUT /v1/skus/smuggled HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n" +
			"Content-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"available\":1}"
		c.send("POST " + route + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n", len(oneLine), oneLine) + "0\r\nnot a trailer\r\n" + smuggled)
		a, ok := c.answer(5 * time.Second)
		if !ok || a.status != http.StatusBadRequest || a.code != "invalid_request" {
			t.Fatalf("%s with a malformed trailer = %v %+v, want 400 invalid_request", route, ok, a)
		}
		if b, ok := c.answer(time.Second); ok {
			t.Errorf("%s: the bytes after the bad trailer were served: %d %q", route, b.status, b.code)
		}
		if n := svc.calls.Load() - before; n != 0 {
			t.Errorf("%s: %d call(s) reached the service", route, n)
		}
		if !a.closedAfter {
			t.Errorf("%s: the 400 does not say Connection: close", route)
		}
	}
}

// TestBodyErrorsOnEveryRoute: a body that cannot be read whole is answered
// at once on every route, body or no body in its contract, and the service
// is not called (once confirm took a 70,000-byte body and confirmed; a GET
// whose body never came waited, then answered 499).
func TestBodyErrorsOnEveryRoute(t *testing.T) {
	svc := &recorder{}
	addr := listen(t, httpapi.Config{Service: svc}, 500*time.Millisecond)
	big := strings.Repeat(" ", 70_000)
	cases := []struct {
		name, req string
		status    int
		code      string
	}{
		{"confirm, 70,000 bytes declared", "POST /v1/orders/" + orderID + "/confirm HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n" + big,
			413, "body_too_large"},
		{"cancel, 70,000 bytes chunked", "POST /v1/orders/" + orderID + "/cancel HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big), 413, "body_too_large"},
		{"GET, 3 of 100 bytes", "GET /v1/orders/" + orderID + " HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc", 400, "invalid_request"},
		{"GET sku, bad chunk", "GET /v1/skus/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "invalid_request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := svc.calls.Load()
			c := dialRaw(t, addr)
			c.send(tc.req)
			a, ok := c.answer(3 * time.Second)
			if !ok || a.status != tc.status || a.code != tc.code || !a.closedAfter {
				t.Fatalf("answer = %v %+v, want %d %s with Connection: close", ok, a, tc.status, tc.code)
			}
			if strings.Contains(a.msg, "cancelled by the client") {
				t.Fatalf("a body error is told as the client's going away: %q", a.msg)
			}
			if n := svc.calls.Load() - before; n != 0 {
				t.Fatalf("%d call(s) reached the service", n)
			}
		})
	}
}

// TestEndlessTrailerIsABodyError: a trailer that never ends is cut off by
// the read timeout and answered as the body error it is, not as a client
// that went away.
func TestEndlessTrailerIsABodyError(t *testing.T) {
	svc := &recorder{}
	addr := listen(t, httpapi.Config{Service: svc}, 500*time.Millisecond)
	c := dialRaw(t, addr)
	c.send("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n", len(oneLine), oneLine) + "0\r\n")
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := io.WriteString(c.conn, "X-Trailer: y\r\n"); err != nil {
				return
			}
		}
	}()
	a, ok := c.answer(3 * time.Second)
	if !ok || a.status != http.StatusBadRequest || a.code != "invalid_request" || strings.Contains(a.msg, "cancelled by the client") {
		t.Fatalf("endless trailer = %v %+v, want 400 invalid_request, not told as the client gone", ok, a)
	}
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("%d call(s) reached the service", n)
	}
}

// TestRefusedBeforeTheBody: what can be refused without the body is, before
// a byte of it is read or asked for with 100 Continue: a declared length
// over the limit, a missing admin token, a media type or a content coding
// the API does not take. Each answers at once, though the body never comes.
func TestRefusedBeforeTheBody(t *testing.T) {
	svc := &recorder{}
	addr := listen(t, httpapi.Config{Service: svc, AdminToken: "s3cret"}, 5*time.Second)
	const json = "Content-Type: application/json\r\n"
	cases := []struct {
		name, head string
		status     int
		code       string
	}{
		{"over the limit", "POST /v1/orders HTTP/1.1\r\nHost: x\r\n" + json + "Content-Length: 1000000\r\n", 413, "body_too_large"},
		{"over the limit, confirm", "POST /v1/orders/" + orderID + "/confirm HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n", 413, "body_too_large"},
		{"no admin token", "PUT /v1/skus/a HTTP/1.1\r\nHost: x\r\n" + json + "Content-Length: 15\r\n", 401, "unauthorized"},
		{"text/plain", "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 40\r\n", 415, "unsupported_media_type"},
		{"gzip", "POST /v1/orders HTTP/1.1\r\nHost: x\r\n" + json + "Content-Encoding: gzip\r\nContent-Length: 40\r\n", 415, "unsupported_media_type"},
	}
	for _, tc := range cases {
		for _, expect := range []string{"", "Expect: 100-continue\r\n"} {
			t.Run(tc.name+strings.TrimSuffix(strings.TrimPrefix(expect, "Expect:"), "\r\n"), func(t *testing.T) {
				c := dialRaw(t, addr)
				c.send(tc.head + expect + "\r\n")
				start := time.Now()
				a, ok := c.answer(2 * time.Second)
				if !ok || a.status != tc.status || a.code != tc.code {
					t.Fatalf("answer = %v %+v, want %d %s before the body is sent", ok, a, tc.status, tc.code)
				}
				if d := time.Since(start); d > time.Second {
					t.Fatalf("answered after %s, waiting for a body it refuses", d)
				}
				if !a.closedAfter {
					t.Fatal("the connection is kept, with the unread body next on it")
				}
			})
		}
	}
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("%d call(s) reached the service", n)
	}
}

// http.ReadResponse skips 1xx answers; the 100 Continue a refused request
// must not get is looked for on the wire itself.
func TestNoContinueForARefusedBody(t *testing.T) {
	addr := listen(t, httpapi.Config{Service: &recorder{}, AdminToken: "s3cret"}, 5*time.Second)
	for _, head := range []string{
		"POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n",
		"PUT /v1/skus/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 15\r\n",
		"POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 40\r\n",
	} {
		c := dialRaw(t, addr)
		c.send(head + "Expect: 100-continue\r\n\r\n")
		_ = c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, _ := c.r.ReadString('\n')
		if !strings.HasPrefix(line, "HTTP/1.1 4") {
			t.Errorf("%q\nfirst answered %q, want its 4xx without 100 Continue", head, line)
		}
	}
	// A body that will be read still gets its 100 Continue.
	c := dialRaw(t, addr)
	c.send("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		fmt.Sprint(len(oneLine)) + "\r\nExpect: 100-continue\r\n\r\n")
	_ = c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, _ := c.r.ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("an acceptable order first answered %q, want 100 Continue", line)
	}
	_, _ = c.r.ReadString('\n')
	c.send(oneLine)
	if a, ok := c.answer(2 * time.Second); !ok || a.status != http.StatusCreated {
		t.Fatalf("the order after 100 Continue = %v %+v", ok, a)
	}
}

// TestTooLargeClosesAfterTheAnswer: a chunked body past 64 KiB is answered
// 413 with Connection: close, and the answer is whole before the server
// ends the connection, though the client is still sending.
func TestTooLargeClosesAfterTheAnswer(t *testing.T) {
	svc := &recorder{}
	addr := listen(t, httpapi.Config{Service: svc}, 5*time.Second)
	c := dialRaw(t, addr)
	c.send("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(done); wg.Wait() }()
	wg.Go(func() {
		chunk := fmt.Sprintf("%x\r\n%s\r\n", 4096, strings.Repeat(" ", 4096))
		for range 100 { // 400 KiB: more than the limit and than net/http drains after it
			select {
			case <-done:
				return
			default:
			}
			if _, err := io.WriteString(c.conn, chunk); err != nil {
				return
			}
		}
	})
	a, ok := c.answer(3 * time.Second)
	if !ok || a.status != http.StatusRequestEntityTooLarge || a.code != "body_too_large" || !a.closedAfter {
		t.Fatalf("chunked body past 64 KiB = %v %+v, want 413 body_too_large with Connection: close", ok, a)
	}
	if svc.calls.Load() != 0 {
		t.Fatal("the service was called")
	}
}

// TestTooLargeWithinTheDrainIsNotKept: a chunked body a little past 64 KiB
// (so that net/http could drain the rest) still ends the connection.
func TestTooLargeWithinTheDrainIsNotKept(t *testing.T) {
	addr := listen(t, httpapi.Config{Service: &recorder{}}, 5*time.Second)
	c := dialRaw(t, addr)
	big := strings.Repeat(" ", 100_000)
	c.send("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big) + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	a, ok := c.answer(3 * time.Second)
	if !ok || a.status != http.StatusRequestEntityTooLarge || !a.closedAfter {
		t.Fatalf("answer = %v %+v, want 413 with Connection: close", ok, a)
	}
	if b, ok := c.answer(time.Second); ok {
		t.Fatalf("the connection served another request after a 413: %d", b.status)
	}
}

// TestHalfCloseAnswers499: a client that shuts down its sending side after
// its request is taken as gone (net/http cancels the request), yet it
// still reads the 499 it is answered.
func TestHalfCloseAnswers499(t *testing.T) {
	svc := &recorder{place: func(ctx context.Context, _ inventory.PlaceRequest) (*inventory.Order, bool, error) {
		<-ctx.Done()
		return nil, false, fmt.Errorf("waiting for locks: %w", ctx.Err())
	}}
	addr := listen(t, httpapi.Config{Service: svc}, 5*time.Second)
	c := dialRaw(t, addr)
	c.send("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		fmt.Sprint(len(oneLine)) + "\r\n\r\n" + oneLine)
	if err := c.conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if a, ok := c.answer(3 * time.Second); !ok || a.status != 499 || a.code != "client_closed_request" {
		t.Fatalf("half-closed client = %v %+v, want 499 client_closed_request", ok, a)
	}
}

// TestHTTP2PrefaceIsNotFound: net/http hands HTTP/2's cleartext preface
// (PRI * HTTP/2.0) to the handler rather than answering 505 itself; it is
// an unknown path like any other, in the API's shape.
func TestHTTP2PrefaceIsNotFound(t *testing.T) {
	addr := listen(t, httpapi.Config{Service: &recorder{}}, 5*time.Second)
	c := dialRaw(t, addr)
	c.send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	_ = c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, _ := io.ReadAll(c.r)
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 404")) || !bytes.Contains(b, []byte(`"not_found"`)) {
		t.Fatalf("PRI * HTTP/2.0 answered %q, want 404 not_found", b)
	}
}

// TestLockUnavailableHidesTheServers: a lock error's cause names the lock
// servers; the answer says only which kind of failure it was, and the
// cause goes to the log.
func TestLockUnavailableHidesTheServers(t *testing.T) {
	for _, sentinel := range []error{lock.ErrUnavailable, lock.ErrNotAcquired, lock.ErrLeaseLost} {
		cause := fmt.Errorf("redlock: batch of 1 keys: no quorum: %w: %w", sentinel,
			&lock.NodeError{Node: "10.9.8.7:19191", Err: errors.New("dial tcp 10.9.8.7:19191: connection refused")})
		svc := &recorder{place: func(context.Context, inventory.PlaceRequest) (*inventory.Order, bool, error) {
			return nil, false, cause
		}}
		var log bytes.Buffer
		h := httpapi.New(httpapi.Config{Service: svc, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		w := hostileReq{"POST", "/v1/orders", oneLine, nil}.serve(h)
		if code := errorCode(t, w); w.Code != http.StatusServiceUnavailable || code != "lock_unavailable" || w.Header().Get("Retry-After") == "" {
			t.Fatalf("%v = %d %q", sentinel, w.Code, code)
		}
		if strings.Contains(w.Body.String(), "10.9.8.7") || !strings.Contains(w.Body.String(), sentinel.Error()) {
			t.Errorf("%v: the answer shows the cause, or not the kind: %s", sentinel, w.Body)
		}
		if !strings.Contains(log.String(), "10.9.8.7") {
			t.Errorf("%v: the cause is not in the log:\n%s", sentinel, log.String())
		}
	}
}

// TestBearerSchemeIgnoresCase: the auth scheme is case-insensitive (RFC
// 9110 §11.1); the token is not.
func TestBearerSchemeIgnoresCase(t *testing.T) {
	h := httpapi.New(httpapi.Config{Service: &recorder{}, AdminToken: "s3cret"})
	for auth, want := range map[string]int{"Bearer s3cret": 200, "bearer s3cret": 200, "BEARER  s3cret": 200,
		"Bearer S3CRET": 401, "Basic s3cret": 401, "Bearers3cret": 401, "s3cret": 401, "": 401} {
		w := hostileReq{"PUT", "/v1/skus/a", `{"available":1}`, http.Header{"Authorization": {auth}}}.serve(h)
		if w.Code != want {
			t.Errorf("Authorization %q = %d, want %d", auth, w.Code, want)
		}
	}
}

// TestBodyMessages: a refused body is told in words a client can act on.
func TestBodyMessages(t *testing.T) {
	h := httpapi.New(httpapi.Config{Service: &recorder{}})
	cases := []struct{ body, want string }{
		{"", "invalid request: request body is empty, want a JSON object"},
		{"  \n", "invalid request: request body is empty, want a JSON object"},
		{"[]", "invalid request: request body: got array, want an object"},
		{`{"lines":[{"sku":"a","quantity":1}],"hold_seconds":99999999999999999999}`, "invalid request: hold_seconds: 99999999999999999999 is out of range"},
		{`{"lines":[{"sku":"a","quantity":-99999999999999999999}]}`, "invalid request: lines.quantity: -99999999999999999999 is out of range"},
		{`{"lines":[{"sku":"a","quantity":1.5}]}`, "invalid request: lines.quantity: got number 1.5, want an integer"},
	}
	for _, c := range cases {
		req := httptest.NewRequest("POST", "/v1/orders", strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &e)
		if w.Code != http.StatusBadRequest || e.Error.Message != c.want {
			t.Errorf("body %q = %d %q, want 400 %q", c.body, w.Code, e.Error.Message, c.want)
		}
	}
}

// TestGoAnswersBeforeTheRouter: Go's server answers some requests itself,
// before the router, in plain text (417's body is empty) and without
// X-Request-Id, on any route, with the connection closed after; Go has no
// option to hand them to the service. Each is listed where README's Limits
// table and api/openapi.yaml list Go's own answers (once, 417 was not).
func TestGoAnswersBeforeTheRouter(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var readmeRows []string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "| ") && strings.Contains(l, "(Go's, plain text") {
			readmeRows = append(readmeRows, l)
		}
	}
	spec, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, specPara, _ := strings.Cut(string(spec), "Before any of this, Go's HTTP server answers")
	specPara, _, _ = strings.Cut(specPara, "\n\n")
	documented := map[string]string{"README.md's Limits table": strings.Join(readmeRows, "\n"), "api/openapi.yaml": specPara}

	srv := httptest.NewUnstartedServer(httpapi.New(httpapi.Config{Service: &recorder{}}))
	srv.Config.MaxHeaderBytes = 1 << 10
	srv.Start()
	t.Cleanup(srv.Close)
	get := "GET /v1/skus/abc HTTP/1.1\r\nHost: x\r\n"
	cases := []struct {
		name, req string
		status    int
	}{
		{"headers over --max-header-bytes", get + "X-Pad: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 431},
		{"malformed header", get + "Bad Header\r\n\r\n", 400},
		{"invalid escape in the path", "GET /v1/skus/%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"Transfer-Encoding other than chunked", "POST /v1/orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"HTTP version other than 1.x", "GET /v1/skus/abc HTTP/3.0\r\nHost: x\r\n\r\n", 505},
		{"Expect other than 100-continue", get + "Expect: 100-continueX\r\n\r\n", 417},
		{"Expect other than 100-continue, with a body", "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
			"Content-Length: " + fmt.Sprint(len(oneLine)) + "\r\nExpect: 200-ok\r\n\r\n" + oneLine, 417},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, srv.Listener.Addr().String())
			c.send(tc.req)
			a, ok := c.answer(3 * time.Second)
			if !ok || a.status != tc.status || a.header.Get("X-Request-Id") != "" || !a.closedAfter {
				t.Fatalf("answer = %v %+v, want Go's own %d, without X-Request-Id, with Connection: close", ok, a, tc.status)
			}
			if ct := a.header.Get("Content-Type"); tc.status != http.StatusExpectationFailed && !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("Content-Type %q, want Go's plain text", ct)
			}
			for doc, text := range documented {
				if !strings.Contains(text, fmt.Sprintf("`%d`", tc.status)) {
					t.Errorf("%s does not list Go's %d among Go's own answers", doc, tc.status)
				}
			}
		})
	}
}

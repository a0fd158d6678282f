package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// The hostile clients below run against a real `stockguard serve`. The
// limits are set through the environment, which an older binary without
// the flags ignores, so each test fails on behaviour, not on a usage error.

// dial opens a raw connection to the instance, for requests no HTTP client
// would send.
func dial(t *testing.T, in *instance) net.Conn {
	t.Helper()
	u, err := url.Parse(in.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// trickle writes p one byte every gap until it is all written or the
// server closes the connection; it returns when done is closed, too.
func trickle(conn net.Conn, p string, gap time.Duration, done <-chan struct{}) {
	for i := 0; i < len(p); i++ {
		select {
		case <-done:
			return
		case <-time.After(gap):
		}
		if _, err := conn.Write([]byte{p[i]}); err != nil {
			return
		}
	}
}

// cutWithin reports how the server ended a connection it should cut: it
// waits up to limit for an answer or a close.
func cutWithin(t *testing.T, conn net.Conn, limit time.Duration) (time.Duration, string) {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(limit))
	first, err := bufio.NewReader(conn).ReadString('\n')
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection was still open %s later", limit)
	}
	return time.Since(start), strings.TrimSpace(first)
}

func TestSlowBodyIsCutOff(t *testing.T) {
	in := startInstance(t, append(backendEnv(t), "STOCKGUARD_READ_TIMEOUT=1s"), "--lock=local")
	conn := dial(t, in)
	body := `{"lines":[{"sku":"slow","quantity":1}]}`
	fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	done := make(chan struct{})
	defer close(done)
	go trickle(conn, body, 300*time.Millisecond, done) // 12 s for the whole body
	d, first := cutWithin(t, conn, 5*time.Second)
	t.Logf("cut after %s: %q", d, first)
}

func TestEndlessHeadersAreCutOff(t *testing.T) {
	in := startInstance(t, append(backendEnv(t), "STOCKGUARD_READ_HEADER_TIMEOUT=1s"), "--lock=local")
	conn := dial(t, in)
	fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	done := make(chan struct{})
	defer close(done)
	go trickle(conn, strings.Repeat("X-Endless: more\r\n", 10_000), 20*time.Millisecond, done)
	d, first := cutWithin(t, conn, 3*time.Second)
	t.Logf("cut after %s: %q", d, first)
}

// OPTIONS * is a path like any other: the router's JSON 404, not
// net/http's undocumented empty 200.
func TestOptionsStarIsNotFound(t *testing.T) {
	in := startInstance(t, backendEnv(t), "--lock=local")
	conn := dial(t, in)
	fmt.Fprint(conn, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"not_found"`) {
		t.Fatalf("OPTIONS * = %d %s; want 404 not_found", res.StatusCode, b)
	}
}

func TestThousandHeadersAreRefused(t *testing.T) {
	in := startInstance(t, backendEnv(t), "--lock=local")
	req, _ := http.NewRequest("GET", in.url+"/healthz", nil)
	for i := range 1000 {
		req.Header.Set(fmt.Sprintf("X-H%04d", i), strings.Repeat("v", 100-len("X-H0000: ")))
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("1,000 headers of 100 bytes = %d, want 431", res.StatusCode)
	}
}

func TestMadeUpMethodsDoNotGrowMetrics(t *testing.T) {
	in := startInstance(t, backendEnv(t), "--lock=local")
	send := func(method, path string) {
		req, _ := http.NewRequest(method, in.url+path, nil)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode >= 500 {
			t.Fatalf("%s %s = %d", method, path, res.StatusCode)
		}
	}
	lines := func() int {
		res, err := client.Get(in.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return strings.Count(string(raw), "\n")
	}
	// Every series a made-up method can reach exists after these, and the
	// scrape's own after two scrapes.
	send("WARM", "/v1/orders")
	send("WARM", "/nowhere")
	lines()
	before := lines()
	for i := range 500 {
		send(fmt.Sprintf("M%03d", i), "/v1/orders")
	}
	after := lines()
	// The Go runtime's own series may shift by a line or two; 500 new
	// methods used to add 20 lines each.
	if after-before > 5 {
		t.Fatalf("/metrics grew from %d to %d lines after 500 requests with made-up methods", before, after)
	}
}

// Orders with keys that are not printable ASCII, among valid orders for
// the same SKU (so coalesced into the same batches), fail alone.
func TestBadKeysFailAloneInABatch(t *testing.T) {
	in := startInstance(t, backendEnv(t), "--lock=local")
	if st, body := call(t, "PUT", in.url+"/v1/skus/batch", `{"available":1000}`); st != 200 {
		t.Fatalf("PUT: %d %v", st, body)
	}
	const n = 60
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	for i := range 2 * n {
		wg.Go(func() {
			key, want := fmt.Sprintf("good-%d", i), 201
			if i%2 == 1 {
				key, want = fmt.Sprintf("bad-\xff\xfe-%d", i), 400
			}
			st, body := call(t, "POST", in.url+"/v1/orders", `{"lines":[{"sku":"batch","quantity":1}]}`, "Idempotency-Key", key)
			mu.Lock()
			defer mu.Unlock()
			got[fmt.Sprintf("%d→%d", want, st)]++
			if st != want {
				t.Errorf("key %q = %d %v, want %d", key, st, body, want)
			}
		})
	}
	wg.Wait()
	t.Logf("answers (want→got): %v", got)
	_, audit := call(t, "GET", in.url+"/v1/skus/batch/audit", "")
	if audit["held"] != float64(n) {
		t.Fatalf("held %v units after %d valid orders: %v", audit["held"], n, audit)
	}
}

func TestSIGTERMWithATricklingClientExitsZero(t *testing.T) {
	const shutdownTimeout = 2 * time.Second
	in := startInstance(t, append(backendEnv(t), "STOCKGUARD_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(),
		"STOCKGUARD_READ_TIMEOUT=1m"), "--lock=local")
	conn := dial(t, in)
	body := `{"lines":[{"sku":"slow","quantity":1}]}`
	fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	done := make(chan struct{})
	defer close(done)
	go trickle(conn, body, time.Second, done)
	time.Sleep(500 * time.Millisecond) // the request is in the handler, reading its body
	if d := in.sigterm(t, shutdownTimeout+5*time.Second); d > shutdownTimeout+3*time.Second {
		t.Fatalf("exited %s after SIGTERM, shutdown timeout %s", d, shutdownTimeout)
	}
}

// TestUnreadBodyConnectionEndsByTheReadTimeout: a route that reads no
// body answers at once, and the connection ends cleanly when
// --read-timeout ends a declared body that never comes (net/http reads and
// drops up to 256 KiB of an unread body after the answer; cutting that
// short resets connections whose body is still arriving).
func TestUnreadBodyConnectionEndsByTheReadTimeout(t *testing.T) {
	const readTimeout = 4 * time.Second
	in := startInstance(t, append(backendEnv(t), "STOCKGUARD_READ_TIMEOUT=4s"), "--lock=local")
	for _, path := range []string{"/healthz", "/nowhere"} {
		conn := dial(t, in)
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", path)
		start := time.Now()
		_ = conn.SetReadDeadline(start.Add(2 * readTimeout))
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		answered := time.Since(start)
		_, err = br.ReadByte()
		if closed := time.Since(start); !res.Close || err != io.EOF || answered > time.Second || closed > readTimeout+time.Second {
			t.Errorf("%s: answered %d after %s (Connection: close %v), connection ended after %s (%v); want the answer at once and a clean close by the %s read timeout",
				path, res.StatusCode, answered.Round(time.Millisecond), res.Close, closed.Round(time.Millisecond), err, readTimeout)
		}
	}
}

// TestHTTP10ChunkedRequestEndsTheConnection: Go's server deletes the
// Transfer-Encoding of an HTTP/1.0 request and frames it by its
// Content-Length; a proxy that honours the chunks would have sent the
// bytes after that length as part of the body (RFC 9112 §6.1). The answer
// closes the connection, and those bytes are never served as a request.
func TestHTTP10ChunkedRequestEndsTheConnection(t *testing.T) {
	in := startInstance(t, backendEnv(t), "--lock=local")
	conn := dial(t, in)
	body := `{"available":5}`
	fmt.Fprintf(conn, "PUT /v1/skus/te10 HTTP/1.0\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"+
		"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n%sGET /smuggled HTTP/1.0\r\n\r\n", len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if !res.Close {
		t.Errorf("answer %d with Connection %q, want close", res.StatusCode, res.Header.Get("Connection"))
	}
	if second, err := http.ReadResponse(br, nil); err == nil {
		b, _ := io.ReadAll(second.Body)
		second.Body.Close()
		t.Fatalf("the bytes after the Content-Length were served as a request: %d %s", second.StatusCode, b)
	}
}

package httpapi_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gctune"
	"github.com/stockguard/stockguard/internal/httpapi"
)

// The tests below hold as many connections as cmd/stockguard's default
// --max-in-flight (1,024) once allowed bodies for, 2,048, under gctune's
// settings, and measure what they cost the instance's heap.

const defaultMaxInFlight = 1024

// connHeap is what the heap may grow by for each connection of these
// tests besides the bodies it buffers: twice the 15 KiB measured for both
// ends of one without a body (net/http's buffers and request, the test's
// reader), under -race too.
const connHeap = 32 << 10

// liveHeap is the heap's live bytes after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// dialN opens n connections to addr and sends head on each; they are
// closed when the test ends.
func dialN(t *testing.T, addr string, n int, head string) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
	}
	return conns
}

// order is a POST /v1/orders of body, with its length declared.
func order(body string) string {
	return "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		fmt.Sprint(len(body)) + "\r\n\r\n" + body
}

// TestHeadersOnlyHoldNoBodyMemory: a client that sends the headers of an
// order declaring 64 KiB and none of its body holds its connection, and no
// buffer of the declared length (once, each held one: 2,048 of them held
// 128 MiB, over the soft memory limit); nor does it keep any other order
// from being read.
func TestHeadersOnlyHoldNoBodyMemory(t *testing.T) {
	defer gctune.Apply(func(string) string { return "" })()
	addr := listen(t, httpapi.Config{Service: &recorder{}, MaxInFlight: defaultMaxInFlight}, 30*time.Second)
	before := liveHeap()
	goroutines := runtime.NumGoroutine()
	const n = 2 * defaultMaxInFlight
	head := "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n"
	dialN(t, addr, n, head)
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine()-goroutines < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections served", runtime.NumGoroutine()-goroutines, n)
		}
	}
	time.Sleep(200 * time.Millisecond) // every request is waiting for its body
	grown := liveHeap() - before
	t.Logf("%d connections waiting for a declared 64 KiB body: live heap grew by %.1f MiB (%.1f KiB a connection)",
		n, float64(grown)/(1<<20), float64(grown)/n/(1<<10))
	if grown > n*connHeap {
		t.Errorf("a connection that sent headers only holds %.1f KiB of heap, want at most %d: a buffer of its declared length?",
			float64(grown)/n/(1<<10), connHeap>>10)
	}
	c := dialRaw(t, addr)
	c.send(order(oneLine))
	if a, ok := c.answer(5 * time.Second); !ok || a.status != http.StatusCreated {
		t.Fatalf("an order while %d clients send headers only = %v %+v, want 201", n, ok, a)
	}
}

// TestBufferedBodiesAreBoundedInBytes: clients that send all of a 64 KiB
// order but its last byte hold at most MaxBufferedBodies between them; the
// bodies past it are refused 503 overloaded, with Retry-After and
// Connection: close (once, 2,048 such clients held 128 MiB, and the
// instance's RSS reached 213 MB). A request without a body is still
// served meanwhile, and the budget is whole again once the bodies are in.
func TestBufferedBodiesAreBoundedInBytes(t *testing.T) {
	defer gctune.Apply(func(string) string { return "" })()
	addr := listen(t, httpapi.Config{Service: &recorder{}, MaxInFlight: defaultMaxInFlight}, 30*time.Second)
	before := liveHeap()
	const n = 2 * defaultMaxInFlight
	body := oneLine + strings.Repeat(" ", 64<<10-len(oneLine))
	msg := []byte(order(body))
	held := n - httpapi.MaxBufferedBodies/len(body) // at least this many are refused
	var refused atomic.Int32
	var wg sync.WaitGroup
	conns := make([]*rawConn, n)
	answers := make([]chan rawAnswer, n)
	for i := range conns {
		c := dialRaw(t, addr)
		conns[i], answers[i] = c, make(chan rawAnswer, 1)
		wg.Go(func() {
			_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.conn.Write(msg[:len(msg)-1]); err != nil {
				return // refused, and closed, before the body was all sent
			}
		})
		go func() {
			_ = c.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			res, err := http.ReadResponse(c.r, nil)
			if err != nil {
				close(answers[i])
				return
			}
			_ = res.Body.Close()
			if res.StatusCode == http.StatusServiceUnavailable {
				refused.Add(1)
			}
			answers[i] <- rawAnswer{status: res.StatusCode, header: res.Header, closedAfter: res.Close}
		}()
	}
	wg.Wait()
	for deadline := time.Now().Add(5 * time.Second); int(refused.Load()) < held && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // the refused connections are closed, no more are refused
	grown := liveHeap() - before
	t.Logf("%d clients sent %d of %d bytes: %d refused; live heap grew by %.1f MiB (budget %d MiB, GOMEMLIMIT %d MiB)",
		n, len(body)-1, len(body), refused.Load(), float64(grown)/(1<<20), httpapi.MaxBufferedBodies>>20, gctune.MemoryLimit>>20)
	if grown > httpapi.MaxBufferedBodies+n*connHeap {
		t.Errorf("bodies waiting for their last byte hold %.1f MiB, want at most the %d MiB budget and %d KiB a connection",
			float64(grown)/(1<<20), httpapi.MaxBufferedBodies>>20, connHeap>>10)
	}
	if int(refused.Load()) < held {
		t.Fatalf("%d of %d bodies of 64 KiB refused, want at least %d: more than %d MiB buffered",
			refused.Load(), n, held, httpapi.MaxBufferedBodies>>20)
	}
	c := dialRaw(t, addr)
	c.send(order(oneLine))
	if a, ok := c.answer(5 * time.Second); !ok || a.status != http.StatusServiceUnavailable || a.code != "overloaded" ||
		a.header.Get("Retry-After") == "" || !a.closedAfter {
		t.Fatalf("an order with the budget spent = %v %+v, want 503 overloaded with Retry-After and Connection: close", ok, a)
	}
	g := dialRaw(t, addr)
	g.send("GET /v1/orders/" + orderID + " HTTP/1.1\r\nHost: x\r\n\r\n")
	if a, ok := g.answer(5 * time.Second); !ok || a.status != http.StatusOK {
		t.Fatalf("a GET without a body with the budget spent = %v %+v, want 200", ok, a)
	}
	for i, c := range conns {
		select {
		case a := <-answers[i]:
			if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || !a.closedAfter {
				t.Fatalf("a body refused = %+v, want 503 with Retry-After and Connection: close", a)
			}
			continue
		default:
		}
		c.send(string(msg[len(msg)-1:]))
		if a, ok := <-answers[i]; !ok || a.status != http.StatusCreated {
			t.Fatalf("a body held, finished = %v %+v, want 201", ok, a)
		}
	}
	c = dialRaw(t, addr)
	c.send(order(oneLine))
	if a, ok := c.answer(5 * time.Second); !ok || a.status != http.StatusCreated {
		t.Fatalf("an order once the bodies are in = %v %+v, want 201", ok, a)
	}
}

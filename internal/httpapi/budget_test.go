package httpapi_test

import (
	"context"
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

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/gctune"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/inventory"
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
// order but its last byte hold at most MaxLargeBodies between them, the
// share of buffers over SmallBody; the bodies past it are refused 503
// overloaded, with Retry-After and Connection: close (once, 2,048 such
// clients held 128 MiB, and the instance's RSS reached 213 MB). An order
// of a few lines, and a request without a body, are still served
// meanwhile, and the budget is whole again once the bodies are in.
func TestBufferedBodiesAreBoundedInBytes(t *testing.T) {
	defer gctune.Apply(func(string) string { return "" })()
	addr := listen(t, httpapi.Config{Service: &recorder{}, MaxInFlight: defaultMaxInFlight}, 30*time.Second)
	before := liveHeap()
	const n = 2 * defaultMaxInFlight
	body := oneLine + strings.Repeat(" ", 64<<10-len(oneLine))
	msg := []byte(order(body))
	held := n - httpapi.MaxLargeBodies/len(body) // at least this many are refused
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
		t.Fatalf("%d of %d bodies of 64 KiB refused, want at least %d: more than %d MiB buffered in bodies over %d KiB",
			refused.Load(), n, held, httpapi.MaxLargeBodies>>20, httpapi.SmallBody>>10)
	}
	c := dialRaw(t, addr)
	c.send(order(oneLine))
	if a, ok := c.answer(5 * time.Second); !ok || a.status != http.StatusCreated {
		t.Fatalf("an order with the share of large bodies spent = %v %+v, want 201", ok, a)
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

// stall opens a connection that sends the headers of an order declaring
// declared bytes, then sent of them, and nothing more; it is closed when
// the test ends.
func stall(t *testing.T, addr string, declared, sent int) net.Conn {
	t.Helper()
	c := dialN(t, addr, 1, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		fmt.Sprint(declared)+"\r\n\r\n"+strings.Repeat(" ", sent))
	return c[0]
}

// padded is an order of one line padded with spaces to size bytes.
func padded(sku string, size int) string {
	line := `{"lines":[{"sku":"` + sku + `","quantity":1}]}`
	return line + strings.Repeat(" ", size-len(line))
}

// TestTricklingLargeBodiesLeaveRoomForOrders: 512 connections, each
// sending half (32 KiB) of a declared 64 KiB body and then nothing, hold
// 64 KiB each, the buffer doubling as soon as it is full: once, they held
// the whole 32 MiB budget with 16 MiB sent, and every order was refused
// 503 overloaded until their read timeout (the body slots it replaced took
// 2,048 connections). Buffers over SmallBody hold only MaxLargeBodies,
// so an order is still read.
func TestTricklingLargeBodiesLeaveRoomForOrders(t *testing.T) {
	addr := listen(t, httpapi.Config{Service: &recorder{}, MaxInFlight: defaultMaxInFlight}, 30*time.Second)
	const n = httpapi.MaxBufferedBodies / (64 << 10) // 512
	for range n {
		stall(t, addr, 64<<10, 32<<10)
	}
	time.Sleep(2 * time.Second) // every half body is in
	c := dialRaw(t, addr)
	c.send(order(oneLine))
	if a, ok := c.answer(5 * time.Second); !ok || a.status != http.StatusCreated {
		t.Fatalf("an order of %d bytes while %d connections each sent 32 KiB of a 64 KiB body (16 MiB in all) = %v %+v, want 201",
			len(oneLine), n, ok, a)
	}
}

// TestBodyBudgetComesBackExactly runs every way a body can end (a panic
// in the service, a 413 over the limit chunked, a client gone mid-body, a
// read timeout mid-body, Expect: 100-continue, a body longer than
// declared, a chunked body of 64 KiB, a body on a GET, a request deadline
// passing in the service), then fills both tiers of the budget to the
// byte, with the connections that denying an order takes: buffers over
// SmallBody to 8 KiB short of MaxLargeBodies, where a body of 8 KiB is
// read and one of a byte more is not, then to the last byte; and the rest
// to 512 bytes short of MaxBufferedBodies, where an order of a few bytes
// is still read (one byte leaked and it is refused), and one more
// connection's first byte leaves none. Each refusal midway (503) gives
// back what its body took.
func TestBodyBudgetComesBackExactly(t *testing.T) {
	svc := &recorder{place: func(ctx context.Context, req inventory.PlaceRequest) (*inventory.Order, bool, error) {
		switch req.Lines[0].SKU {
		case "panic":
			panic("budget test")
		case "slow":
			<-ctx.Done()
			return nil, false, ctx.Err()
		}
		return &inventory.Order{ID: uuid.New(), Status: inventory.StatusReserved}, false, nil
	}}
	// Long enough for the fill below, under -race, to end before its
	// first connections are cut off.
	const readTimeout = 10 * time.Second
	addr := listen(t, httpapi.Config{Service: svc, MaxInFlight: defaultMaxInFlight, RequestTimeout: 300 * time.Millisecond}, readTimeout)
	want := func(name string, c *rawConn, status int) {
		t.Helper()
		if a, ok := c.answer(5 * time.Second); !ok || a.status != status {
			t.Fatalf("%s = %v %+v, want %d", name, ok, a, status)
		}
	}
	send := func(name, req string, status int) {
		t.Helper()
		c := dialRaw(t, addr)
		c.send(req)
		want(name, c, status)
	}

	timedOut := stall(t, addr, 3000, 1500) // ends in the read timeout

	send("a panic in the service", order(padded("panic", 3000)), http.StatusInternalServerError)
	send("a chunked body over 64 KiB", "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 70_000, strings.Repeat(" ", 70_000)), http.StatusRequestEntityTooLarge)

	c := dialRaw(t, addr)
	c.send("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 3000\r\n\r\n" + strings.Repeat(" ", 1500))
	_ = c.conn.(*net.TCPConn).CloseWrite()
	want("a body cut off by a half-close", c, http.StatusBadRequest)

	c = dialRaw(t, addr)
	body := padded("a", 2000)
	c.send("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n")
	want("100 Continue", c, http.StatusContinue)
	c.send(body)
	want("an order after 100 Continue", c, http.StatusCreated)

	send("a body longer than declared", order(oneLine)+strings.Repeat("x", 700), http.StatusCreated)
	chunk := padded("a", 64<<10)
	send("a chunked body of 64 KiB", "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(chunk), chunk), http.StatusCreated)
	send("a GET with a body", "GET /v1/orders/"+orderID+" HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n"+strings.Repeat(" ", 900), http.StatusOK)
	send("an order past its deadline", order(padded("slow", 1000)), http.StatusServiceUnavailable)

	// The timed-out body is over once the server closed it.
	_ = timedOut.SetReadDeadline(time.Now().Add(readTimeout + 2*time.Second))
	_, _ = timedOut.Read(make([]byte, 4096))

	// Buffers over SmallBody: 255 x 65,536 + 57,344 = MaxLargeBodies - 8 KiB.
	for range httpapi.MaxLargeBodies/(64<<10) - 1 {
		stall(t, addr, 64<<10, 32<<10)
	}
	stall(t, addr, 56<<10, 32<<10)
	time.Sleep(time.Second)
	send("a body of 8 KiB and a byte, 8 KiB left to large bodies", order(padded("a", 8<<10+1)), http.StatusServiceUnavailable)
	for i := range 2 {
		send(fmt.Sprintf("body %d of 8 KiB, 8 KiB left to large bodies", i), order(padded("a", 8<<10)), http.StatusCreated)
	}
	stall(t, addr, 8<<10, 4<<10) // takes the last 8 KiB
	time.Sleep(300 * time.Millisecond)
	send("a body of 4 KiB and a byte, none left to large bodies", order(padded("a", httpapi.SmallBody+1)), http.StatusServiceUnavailable)
	send("a body of 4 KiB, none left to large bodies", order(padded("a", httpapi.SmallBody)), http.StatusCreated)

	// The rest: 4,095 x 4,096 + 3,584 = MaxBufferedBodies - MaxLargeBodies - 512,
	// each buffer a step ahead of the half it was sent.
	for range (httpapi.MaxBufferedBodies-httpapi.MaxLargeBodies)/httpapi.SmallBody - 1 {
		stall(t, addr, httpapi.SmallBody, httpapi.SmallBody/2)
	}
	stall(t, addr, 3584, 2048)
	time.Sleep(2 * time.Second)

	// A body of 600 bytes takes its first 512 and fails the step to 600:
	// 503 mid-read, its 512 given back.
	send("a body whose next step does not fit", order(padded("a", 600)), http.StatusServiceUnavailable)
	for i := range 2 {
		send(fmt.Sprintf("order %d with 512 bytes of the budget left", i), order(oneLine), http.StatusCreated)
	}
	stall(t, addr, 100, 1) // its first byte takes the last 512
	time.Sleep(300 * time.Millisecond)
	send("an order with no budget left", order(oneLine), http.StatusServiceUnavailable)
}

// TestHeldOrderSharesNoBytesWithItsBody: an order whose deadline passes
// while the service still holds it (as the coalescer's queue does) keeps
// its SKUs, though its body's pooled buffer has since been reused by
// other orders: the request the handler built shares no bytes with it.
func TestHeldOrderSharesNoBytesWithItsBody(t *testing.T) {
	var mu sync.Mutex
	var kept []inventory.PlaceRequest
	svc := &recorder{place: func(ctx context.Context, req inventory.PlaceRequest) (*inventory.Order, bool, error) {
		if strings.HasPrefix(req.Lines[0].SKU, "held") {
			mu.Lock()
			kept = append(kept, req)
			mu.Unlock()
			<-ctx.Done()
			return nil, false, ctx.Err()
		}
		return &inventory.Order{ID: uuid.New(), Status: inventory.StatusReserved}, false, nil
	}}
	addr := listen(t, httpapi.Config{Service: svc, MaxInFlight: 64, RequestTimeout: 200 * time.Millisecond}, 10*time.Second)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			c := dialRaw(t, addr)
			c.send(order(fmt.Sprintf(`{"lines":[{"sku":"held-%d","quantity":1},{"sku":"second-%d","quantity":2}]}`, i, i)))
			_, _ = c.answer(5 * time.Second)
		})
	}
	wg.Wait()
	for i := range 200 {
		wg.Go(func() {
			c := dialRaw(t, addr)
			c.send(order(fmt.Sprintf(`{"lines":[{"sku":"zzzzzzzz%d","quantity":1},{"sku":"yyyyyyyyy%d","quantity":2}]}`, i, i)))
			_, _ = c.answer(5 * time.Second)
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(kept) != 8 {
		t.Fatalf("%d orders held, want 8", len(kept))
	}
	for _, r := range kept {
		if !strings.HasPrefix(r.Lines[0].SKU, "held-") || !strings.HasPrefix(r.Lines[1].SKU, "second-") {
			t.Errorf("an order held past its request = %+v: its SKUs changed with the pooled body", r.Lines)
		}
	}
}

// Package fakeservice is a stand-in for Stockguard's HTTP API for the load
// tester's own tests: an http.Handler keeping its state in memory, safe or
// lossy (reads, pauses and writes without a lock, as the none backend does),
// and ServeMain, which lets a test binary act as `stockguard serve` so that
// the code starting instances runs against real child processes. Only tests
// import it.
package fakeservice

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/loadtest/client"
)

// Service implements just enough of Stockguard's HTTP contract for the
// load tester's tests. lossy makes it read, pause and write without a lock,
// which loses updates and oversells exactly as the none backend does.
type Service struct {
	token string
	lossy bool

	mu     sync.Mutex
	skus   map[string]*fakeSKU
	idem   map[string]*fakeIdem
	orders map[string][]client.OrderLine
	locks  map[string]*sync.Mutex
	fence  uint64

	// FailEvery makes every n-th order answer 503 lock_unavailable.
	FailEvery int
	count     int
}

type fakeSKU struct {
	available, reserved, received int64
	fence                         uint64
}

type fakeIdem struct {
	hash   [32]byte
	done   bool
	status int
	body   []byte
}

// New returns an empty service that wants token for PUT /v1/skus; lossy
// makes it lose updates and oversell.
func New(token string, lossy bool) *Service {
	return &Service{token: token, lossy: lossy, skus: map[string]*fakeSKU{}, idem: map[string]*fakeIdem{},
		orders: map[string][]client.OrderLine{}, locks: map[string]*sync.Mutex{}}
}

// SKUCount is the number of SKUs created so far.
func (f *Service) SKUCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.skus)
}

// Server serves f on a loopback port until the test ends.
func (f *Service) Server(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": code}})
}

// ServeHTTP answers the API calls the load tester makes.
func (f *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/healthz" || p == "/readyz":
		writeJSON(w, 200, map[string]string{"status": "ok"})
	case r.Method == http.MethodPost && p == "/v1/orders":
		f.placeOrder(w, r)
	case strings.HasPrefix(p, "/v1/skus/") && strings.HasSuffix(p, "/audit") && r.Method == http.MethodGet:
		f.audit(w, strings.TrimSuffix(strings.TrimPrefix(p, "/v1/skus/"), "/audit"))
	case strings.HasPrefix(p, "/v1/skus/") && r.Method == http.MethodPut:
		f.putSKU(w, r, strings.TrimPrefix(p, "/v1/skus/"))
	case strings.HasPrefix(p, "/v1/skus/") && r.Method == http.MethodGet:
		f.getSKU(w, strings.TrimPrefix(p, "/v1/skus/"))
	default:
		writeErr(w, 404, "not_found")
	}
}

func (f *Service) skuBody(name string, s *fakeSKU) map[string]any {
	return map[string]any{"sku": name, "available": s.available, "reserved": s.reserved, "sold": 0, "received": s.received, "fence_token": s.fence}
}

func (f *Service) putSKU(w http.ResponseWriter, r *http.Request, name string) {
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		writeErr(w, 401, "unauthorized")
		return
	}
	var body struct{ Available int64 }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeErr(w, 400, "invalid_request")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.skus[name]
	if s == nil {
		s = &fakeSKU{}
		f.skus[name] = s
		f.locks[name] = &sync.Mutex{}
	}
	s.received += body.Available - s.available
	s.available = body.Available
	writeJSON(w, 200, f.skuBody(name, s))
}

func (f *Service) getSKU(w http.ResponseWriter, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.skus[name]
	if s == nil {
		writeErr(w, 404, "unknown_sku")
		return
	}
	writeJSON(w, 200, f.skuBody(name, s))
}

func (f *Service) audit(w http.ResponseWriter, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.skus[name]
	if s == nil {
		writeErr(w, 404, "unknown_sku")
		return
	}
	var held int64
	for _, lines := range f.orders {
		for _, l := range lines {
			if l.SKU == name {
				held += int64(l.Quantity)
			}
		}
	}
	over := max(0, held-s.received)
	lost := s.received - held - s.available
	writeJSON(w, 200, map[string]any{"sku": name, "received": s.received, "held": held, "sold": 0, "available": s.available,
		"oversold": over, "lost_units": lost, "consistent": over == 0 && lost == 0})
}

func (f *Service) placeOrder(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var req client.OrderRequest
	if err := json.Unmarshal(raw, &req); err != nil || len(req.Lines) == 0 {
		writeErr(w, 400, "invalid_request")
		return
	}
	key, hash := r.Header.Get("Idempotency-Key"), sha256.Sum256(raw)
	f.mu.Lock()
	if e := f.idem[key]; key != "" && e != nil {
		f.mu.Unlock()
		switch {
		case !e.done: // whatever the body: the first may yet fail and free the key
			writeErr(w, 409, "idempotency_key_in_flight")
		case e.hash != hash:
			writeErr(w, 422, "idempotency_key_reused")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(e.status)
			_, _ = w.Write(e.body)
		}
		return
	}
	e := &fakeIdem{hash: hash}
	if key != "" {
		f.idem[key] = e
	}
	f.count++
	fail := f.FailEvery > 0 && f.count%f.FailEvery == 0
	f.mu.Unlock()

	status, body := f.reserve(req, fail)
	f.mu.Lock()
	e.done, e.status, e.body = true, status, body
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (f *Service) reserve(req client.OrderRequest, fail bool) (int, []byte) {
	errBody := func(code string) []byte {
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": code}})
		return b
	}
	if fail {
		return 503, errBody("lock_unavailable")
	}
	f.mu.Lock()
	var ls []*sync.Mutex
	for _, l := range req.Lines {
		if f.skus[l.SKU] == nil {
			f.mu.Unlock()
			return 404, errBody("unknown_sku")
		}
		ls = append(ls, f.locks[l.SKU])
	}
	f.mu.Unlock()
	if !f.lossy {
		// Sorted order would avoid deadlock in general; the fake takes one
		// lock at a time for the whole order instead.
		f.mu.Lock()
		defer f.mu.Unlock()
	}
	// Read.
	snap := make([]fakeSKU, len(req.Lines))
	f.withMu(func() {
		for i, l := range req.Lines {
			snap[i] = *f.skus[l.SKU]
		}
	})
	for i, l := range req.Lines {
		if snap[i].available < int64(l.Quantity) {
			return 409, errBody("insufficient_stock")
		}
	}
	if f.lossy {
		time.Sleep(time.Duration(rand.IntN(400)) * time.Microsecond) // the window for lost updates
	}
	// Write what was computed from the read.
	id := uuid.NewString()
	type line struct {
		SKU        string `json:"sku"`
		Quantity   int    `json:"quantity"`
		FenceToken uint64 `json:"fence_token"`
	}
	var out []line
	f.withMu(func() {
		f.fence++
		for i, l := range req.Lines {
			s := f.skus[l.SKU]
			s.available = snap[i].available - int64(l.Quantity)
			s.reserved = snap[i].reserved + int64(l.Quantity)
			s.fence = f.fence
			out = append(out, line{l.SKU, l.Quantity, f.fence})
		}
		f.orders[id] = req.Lines
	})
	b, _ := json.Marshal(map[string]any{"order_id": id, "status": "reserved", "lines": out, "expires_at": time.Now().Add(time.Hour)})
	return 201, b
}

// withMu runs fn under f.mu unless the safe path already holds it.
func (f *Service) withMu(fn func()) {
	if f.lossy {
		f.mu.Lock()
		defer f.mu.Unlock()
	}
	fn()
}

// Env, set to 1, makes a test binary act as `stockguard serve` (the fake):
// its TestMain calls ServeMain, so that compare can start, health-check and
// SIGTERM real child processes.
const Env = "LOADTEST_FAKE_SERVE"

// ServeMain parses the serve flags compare passes and serves the fake:
// lossy for --lock=none or local, safe otherwise.
func ServeMain(args []string) int {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(os.Stderr, "fake: want serve")
		return 2
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "", "")
	lock := fs.String("lock", "", "")
	fs.String("fencing", "", "")
	// As serve does: the flag, else the variable the load tester sets.
	token := fs.String("admin-token", os.Getenv("STOCKGUARD_ADMIN_TOKEN"), "")
	fs.String("lock-ttl", "", "")
	fs.String("redis-addrs", "", "")
	fs.String("zk-servers", "", "")
	fs.String("database-url", "", "")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake:", err)
		return 1
	}
	// Each fake process keeps its own state (real instances share Postgres),
	// so compare tests start one instance per backend.
	srv := &http.Server{Handler: New(*token, *lock == "none" || *lock == "local")}
	go func() { <-ctx.Done(); _ = srv.Shutdown(context.Background()) }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return 1
	}
	return 0
}

// SlowProxy forwards to target one request at a time, each after delay:
// a service that has stalled.
func SlowProxy(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	var mu sync.Mutex
	client := &http.Client{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			writeJSON(w, 200, map[string]string{"status": "ok"})
			return
		}
		mu.Lock()
		defer mu.Unlock()
		time.Sleep(delay)
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.Path, r.Body)
		req.Header = r.Header.Clone()
		resp, err := client.Do(req)
		if err != nil {
			writeErr(w, 502, "bad_gateway")
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// Context is a context for one test, bounded to a minute and cancelled
// when the test ends.
func Context(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

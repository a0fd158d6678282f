package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/metrics"
	"github.com/stockguard/stockguard/loadtest/bench/floor"
)

// placeAtOnce places every order without a lock or a store, answered as
// the service would: what is left is the edge.
func placeAtOnce(_ context.Context, req inventory.PlaceRequest) (*inventory.Order, bool, error) {
	now := time.Now().Truncate(time.Microsecond)
	o := &inventory.Order{ID: uuid.Must(uuid.NewV7()), Status: inventory.StatusReserved,
		IdempotencyKey: req.IdempotencyKey, CreatedAt: now, ExpiresAt: now.Add(req.Hold),
		Lines: make([]inventory.Line, len(req.Lines))}
	for i, l := range req.Lines {
		o.Lines[i] = inventory.Line{SKU: l.SKU, Quantity: l.Quantity, FenceToken: 1}
	}
	return o, false, nil
}

// BenchmarkOrderEdge is what the HTTP edge costs one order, next to its
// limit measured in the same run: the service's router (every middleware,
// the metrics, the strict decoding, the answer) in front of an Inventory
// that places at once, and the bench's HTTP floor (a bare gin handler that
// decodes the same body and answers the same shape). Both are served in
// process, without sockets, so the difference is the service's own CPU
// per order at its edge; the judge's request is sent to both.
func BenchmarkOrderEdge(b *testing.B) {
	const body = `{"lines":[{"sku":"bench-hot-0001","quantity":1}]}`
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "redlock")
	service := m.InFlight(httpapi.New(httpapi.Config{Service: &recorder{place: placeAtOnce}, Metrics: m, Gatherer: reg,
		MaxInFlight: 4096, RequestTimeout: 10 * time.Second}))
	for _, h := range []struct {
		name    string
		handler http.Handler
	}{{"floor", floor.Handler()}, {"service", service}} {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n++
				req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "bench-"+strconv.Itoa(n))
				w := httptest.NewRecorder()
				h.handler.ServeHTTP(w, req)
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}

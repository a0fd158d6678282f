// Package httpapi is Stockguard's HTTP interface on gin. gin stays in this
// package: handlers hand the request's context, never *gin.Context, to the
// inventory service.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/metrics"
)

// Inventory is what the handlers need of the service.
type Inventory interface {
	Place(ctx context.Context, req inventory.PlaceRequest) (*inventory.Order, bool, error)
	SetStock(ctx context.Context, sku string, available int64) (inventory.SKU, error)
	SetStockIf(ctx context.Context, sku string, available int64, expect inventory.StockExpectation) (inventory.SKU, error)
	SKU(ctx context.Context, sku string) (inventory.SKU, error)
	Audit(ctx context.Context, sku string) (inventory.Audit, error)
	Order(ctx context.Context, id string) (*inventory.Order, error)
	Confirm(ctx context.Context, id string) (*inventory.Order, error)
	Cancel(ctx context.Context, id string) (*inventory.Order, error)
	Ready(ctx context.Context) error
}

// Config wires the handler.
type Config struct {
	Service Inventory
	Metrics *metrics.Metrics
	// Gatherer, when set, is served on GET /metrics; nil leaves /metrics to
	// a listener of its own (--metrics-addr).
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
	// AdminToken, when set, is required as a bearer token on PUT /v1/skus.
	AdminToken string
	// Chaos honours the X-Chaos-Pause header (tests and demos only).
	Chaos bool
	// ZKSession, with Chaos, serves GET /debug/zk-session (see chaos.go).
	ZKSession ZKSessionFunc
	// MaxInFlight bounds the /v1 requests served at once; beyond it they
	// answer 503 overloaded. 0 is no bound.
	MaxInFlight int
	// LockProbe, when set, reports the lock backend's health in /readyz's
	// body (never as unreadiness).
	LockProbe *metrics.LockProbe
	// RequestTimeout bounds how long a /v1 request runs before it answers
	// 503 timeout. 0 is no bound.
	RequestTimeout time.Duration
	// TracerProvider, when set, gives every request a server span (see
	// tracing.go); nil installs nothing.
	TracerProvider trace.TracerProvider
}

type server struct {
	Config
	sheds shedLog
}

// New returns the service's http.Handler.
func New(c Config) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{Config: c, sheds: shedLog{every: shedLogEvery}}
	r := gin.New()
	r.HandleMethodNotAllowed = true
	// A redirect has no JSON body; /v1/orders/ is simply not a route.
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	// Route on the path as sent: gin unescapes each parameter itself, so a
	// %2F stays inside its SKU or order id, which its check then refuses,
	// instead of splitting the decoded path into another route's segments.
	r.UseRawPath = true
	r.ContextWithFallback = true
	s.routes(r)
	return r
}

package httpapi

import (
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes is the whole API surface.
func (s *server) routes(r *gin.Engine) {
	s.useTracing(r) // first: its span covers the other middleware
	// observe outside recover, so a request that panicked is counted and
	// logged with its 500 like any other.
	r.Use(s.requestID, closeFramed, s.observe, s.recover, s.renderErrors)
	// The routes below up to /v1 read no body: noBody answers at once
	// whatever body is declared, and never waits for one.
	r.NoRoute(noBody, func(c *gin.Context) { _ = c.Error(errNotFound) })
	r.NoMethod(noBody, func(c *gin.Context) { _ = c.Error(errMethod) })

	r.GET("/healthz", noBody, s.healthz)
	r.GET("/readyz", noBody, s.readyz)
	if s.Gatherer != nil {
		// Outside the API's bound (see below), not every bound: a few
		// scrapes at once, each answered after it leaves its slot.
		r.GET("/metrics", noBody, answerLater, limit(MetricsInFlight),
			gin.WrapH(promhttp.HandlerFor(s.Gatherer, promhttp.HandlerOpts{})))
	}
	s.debugRoutes(r) // only with --chaos: see chaos.go

	// Probes and /metrics stay outside the bound: an overloaded instance is
	// alive, and its metrics are how an operator sees the overload. What
	// can refuse a request without its body (the admin token, the media
	// type, the declared length) runs before the body is read, or asked
	// for with 100 Continue; the body is in before a request takes a slot,
	// and the answer goes out after the request has left both (answerLater).
	body, inFlight, until := readBody(), limit(s.MaxInFlight), deadline(s.RequestTimeout)
	v1 := r.Group("/v1")
	v1.PUT("/skus/:sku", s.admin, jsonBody, answerLater, body, inFlight, until, s.putSKU)
	v1.GET("/skus/:sku", answerLater, body, inFlight, until, s.getSKU)
	v1.GET("/skus/:sku/audit", answerLater, body, inFlight, until, s.auditSKU)
	v1.POST("/orders", s.countOrder, jsonBody, answerLater, body, inFlight, until, s.placeOrder)
	v1.GET("/orders/:id", answerLater, body, inFlight, until, s.getOrder)
	v1.POST("/orders/:id/confirm", answerLater, body, inFlight, until, s.confirmOrder)
	v1.POST("/orders/:id/cancel", answerLater, body, inFlight, until, s.cancelOrder)
}

// MetricsInFlight bounds the /metrics scrapes served at once (a Prometheus
// pair and an operator's curl); beyond it, 503 overloaded. cmd/stockguard
// gives --metrics-addr's listener the same bound.
const MetricsInFlight = 4

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
	r.Use(s.requestID, s.observe, s.recover, s.renderErrors)
	r.NoRoute(func(c *gin.Context) { _ = c.Error(errNotFound) })
	r.NoMethod(func(c *gin.Context) { _ = c.Error(errMethod) })

	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)
	if s.Gatherer != nil {
		r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.Gatherer, promhttp.HandlerOpts{})))
	}
	s.debugRoutes(r) // only with --chaos: see chaos.go

	// Probes and /metrics stay outside the bound: an overloaded instance is
	// alive, and its metrics are how an operator sees the overload. What
	// can refuse a request without its body (the admin token, the media
	// type, the declared length) runs before the body is read, or asked
	// for with 100 Continue; the body is in before a request takes a slot.
	body, inFlight, until := readBody(s.MaxInFlight), limit(s.MaxInFlight), deadline(s.RequestTimeout)
	v1 := r.Group("/v1")
	v1.PUT("/skus/:sku", s.admin, jsonBody, body, inFlight, until, s.putSKU)
	v1.GET("/skus/:sku", body, inFlight, until, s.getSKU)
	v1.GET("/skus/:sku/audit", body, inFlight, until, s.auditSKU)
	v1.POST("/orders", jsonBody, body, inFlight, until, s.placeOrder)
	v1.GET("/orders/:id", body, inFlight, until, s.getOrder)
	v1.POST("/orders/:id/confirm", body, inFlight, until, s.confirmOrder)
	v1.POST("/orders/:id/cancel", body, inFlight, until, s.cancelOrder)
}

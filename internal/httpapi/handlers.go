package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/reservation"
)

func (s *server) healthz(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) }

// readyTimeout bounds the database's part of /readyz, as the lock probe's
// own timeout bounds the lock's: a probe that hangs on an exhausted pool
// tells the orchestrator less than a prompt 503.
const readyTimeout = 2 * time.Second

// readyz answers whether this instance can serve: its database and schema.
// The lock backend's health is in the body only: the lock servers are shared
// by every replica, so failing readiness on them would pull all replicas out
// of rotation at once, reads included, which answer without a lock.
func (s *server) readyz(c *gin.Context) {
	ctx := c.Request.Context()
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	err := s.Service.Ready(rctx)
	cancel()
	if err != nil {
		fail(c, fmt.Errorf("%w: %w", errServiceUnhealthy, err))
		return
	}
	body := gin.H{"status": "ready"}
	if s.LockProbe != nil {
		body["lock"] = s.LockProbe.Last(ctx) // the periodic probe's: no wait on a hanging lock server
	}
	c.JSON(http.StatusOK, body)
}

type stockRequest struct {
	Available *int64 `json:"available"`
	// ExpectAvailable and ExpectReceived, when set, are the SKU's counters
	// the level is to be set over (inventory.StockExpectation); JSON null is
	// absent, as for available.
	ExpectAvailable *int64 `json:"expect_available"`
	ExpectReceived  *int64 `json:"expect_received"`
}

var stockFields = map[string]bool{"available": true, "expect_available": true, "expect_received": true}

func (s *server) putSKU(c *gin.Context) {
	sku := c.Param("sku")
	if err := inventory.ValidateSKU(sku); err != nil {
		fail(c, err)
		return
	}
	var req stockRequest
	if err := decodeStrict(requestBody(c), &req, stockFields); err != nil {
		fail(c, err)
		return
	}
	if req.Available == nil {
		fail(c, fmt.Errorf("%w: available is required", inventory.ErrInvalid))
		return
	}
	ctx, err := s.chaos(c)
	if err != nil {
		fail(c, err)
		return
	}
	expect := inventory.StockExpectation{Available: req.ExpectAvailable, Received: req.ExpectReceived}
	var out inventory.SKU
	if expect != (inventory.StockExpectation{}) {
		out, err = s.Service.SetStockIf(ctx, sku, *req.Available, expect)
	} else {
		out, err = s.Service.SetStock(ctx, sku, *req.Available)
	}
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (s *server) getSKU(c *gin.Context) {
	if err := inventory.ValidateSKU(c.Param("sku")); err != nil {
		fail(c, err)
		return
	}
	out, err := s.Service.SKU(c.Request.Context(), c.Param("sku"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (s *server) auditSKU(c *gin.Context) {
	if err := inventory.ValidateSKU(c.Param("sku")); err != nil {
		fail(c, err)
		return
	}
	out, err := s.Service.Audit(c.Request.Context(), c.Param("sku"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

type orderRequest struct {
	Lines       []lineRequest `json:"lines"`
	HoldSeconds *int64        `json:"hold_seconds"`
}

type lineRequest struct {
	SKU      *string `json:"sku"`
	Quantity *int64  `json:"quantity"`
}

var orderFields = map[string]bool{"lines": true, "hold_seconds": true, "sku": true, "quantity": true}

func (s *server) placeOrder(c *gin.Context) {
	o, replayed, err := s.place(c)
	if err != nil {
		fail(c, err)
		return
	}
	if replayed {
		c.Header(replayedHeader, "true")
	}
	c.Header("Location", "/v1/orders/"+o.ID.String())
	c.JSON(http.StatusCreated, o)
}

const replayedHeader = "Idempotent-Replayed"

// countOrder counts each order placement in stockguard_orders_total by its
// outcome. It runs first on the route, so the orders refused before
// placeOrder (media type, body size, in-flight bound, a panic) are counted
// with the code they are answered with, as the others are.
func (s *server) countOrder(c *gin.Context) {
	if s.Metrics == nil {
		c.Next()
		return
	}
	answered := false
	defer func() {
		if !answered { // a panic: recover, outside, answers 500 internal
			s.Metrics.Order("internal")
		}
	}()
	c.Next()
	answered = true
	switch {
	case len(c.Errors) > 0:
		_, body := classify(c.Errors[0].Err)
		s.Metrics.Order(body.Code)
	case c.Writer.Header().Get(replayedHeader) != "":
		s.Metrics.Order("replayed")
	default:
		s.Metrics.Order("created")
	}
}

func (s *server) place(c *gin.Context) (*inventory.Order, bool, error) {
	key, err := idempotencyKey(c.Request.Header)
	if err != nil {
		return nil, false, err
	}
	var body orderRequest
	if err := decodeStrict(requestBody(c), &body, orderFields); err != nil {
		return nil, false, err
	}
	req := inventory.PlaceRequest{IdempotencyKey: key, Lines: make([]inventory.LineRequest, len(body.Lines))}
	for i, l := range body.Lines {
		if l.SKU == nil || l.Quantity == nil {
			return nil, false, fmt.Errorf("%w: lines[%d] needs sku and quantity", inventory.ErrInvalid, i)
		}
		req.Lines[i] = inventory.LineRequest{SKU: *l.SKU, Quantity: *l.Quantity}
	}
	if h := body.HoldSeconds; h != nil {
		if *h < 1 || *h > int64(inventory.MaxHold/time.Second) {
			return nil, false, fmt.Errorf("%w: hold_seconds must be in 1..%d", inventory.ErrInvalid, int64(inventory.MaxHold/time.Second))
		}
		req.Hold = time.Duration(*h) * time.Second
	}
	if err := req.Validate(); err != nil {
		return nil, false, err
	}
	ctx, err := s.chaos(c)
	if err != nil {
		return nil, false, err
	}
	return s.Service.Place(ctx, req)
}

// idempotencyKey returns the request's Idempotency-Key, "" when it has
// none. A key sent twice is refused: which of the two counts would be up to
// every proxy on the way.
func idempotencyKey(h http.Header) (string, error) {
	keys := h.Values("Idempotency-Key")
	switch len(keys) {
	case 0:
		return "", nil
	case 1:
		return keys[0], inventory.ValidateIdempotencyKey(keys[0])
	}
	return "", fmt.Errorf("%w: Idempotency-Key sent %d times", inventory.ErrInvalid, len(keys))
}

func (s *server) getOrder(c *gin.Context) {
	if err := inventory.ValidateOrderID(c.Param("id")); err != nil {
		fail(c, err)
		return
	}
	s.answerOrder(c)(s.Service.Order(c.Request.Context(), c.Param("id")))
}

func (s *server) confirmOrder(c *gin.Context) {
	if err := inventory.ValidateOrderID(c.Param("id")); err != nil {
		fail(c, err)
		return
	}
	ctx, err := s.chaos(c)
	if err != nil {
		fail(c, err)
		return
	}
	s.answerOrder(c)(s.Service.Confirm(ctx, c.Param("id")))
}

func (s *server) cancelOrder(c *gin.Context) {
	if err := inventory.ValidateOrderID(c.Param("id")); err != nil {
		fail(c, err)
		return
	}
	ctx, err := s.chaos(c)
	if err != nil {
		fail(c, err)
		return
	}
	s.answerOrder(c)(s.Service.Cancel(ctx, c.Param("id")))
}

func (s *server) answerOrder(c *gin.Context) func(*inventory.Order, error) {
	return func(o *inventory.Order, err error) {
		if err != nil {
			fail(c, err)
			return
		}
		c.JSON(http.StatusOK, o)
	}
}

// MaxChaosPause is the longest X-Chaos-Pause or X-Chaos-Stall honoured; a
// server's write deadline must leave room for it (see cmd/stockguard).
const MaxChaosPause = 5 * time.Minute

// chaos returns the request context, carrying the X-Chaos-Pause stall (a
// paused process: no lease watchdog) or the X-Chaos-Stall one (a slow step:
// the watchdog renews on) when the service runs with --chaos; without it
// both headers are ignored.
func (s *server) chaos(c *gin.Context) (context.Context, error) {
	ctx := c.Request.Context()
	if !s.Chaos {
		return ctx, nil
	}
	pause, stall := c.GetHeader("X-Chaos-Pause"), c.GetHeader("X-Chaos-Stall")
	if pause == "" && stall == "" {
		return ctx, nil
	}
	if pause != "" && stall != "" {
		return nil, fmt.Errorf("%w: X-Chaos-Pause and X-Chaos-Stall exclude each other", inventory.ErrInvalid)
	}
	name, with, h := "X-Chaos-Pause", reservation.WithPause, pause
	if stall != "" {
		name, with, h = "X-Chaos-Stall", reservation.WithStall, stall
	}
	d, err := time.ParseDuration(h)
	if err != nil || d < 0 || d > MaxChaosPause {
		bad := fmt.Errorf("%w: %s must be a duration in 0..%s", inventory.ErrInvalid, name, MaxChaosPause)
		if err != nil { // its text quotes the value whole
			return nil, errors.Join(bad, errors.New(inventory.Clip(err.Error())))
		}
		return nil, bad
	}
	return with(ctx, d), nil
}

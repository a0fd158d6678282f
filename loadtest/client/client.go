// Package client is the load tester's HTTP client of the Stockguard API: it
// creates and reads SKUs, reads their audit, places orders with an
// idempotency key and classifies every answer into a Kind. It talks to the
// service only over HTTP, as any client would, and imports no service code.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxBody bounds how much of any answer the client reads.
const maxBody = 1 << 20

// SKUState is the body of GET and PUT /v1/skus/{sku}: the service's counters.
type SKUState struct {
	SKU        string `json:"sku"`
	Available  int64  `json:"available"`
	Reserved   int64  `json:"reserved"`
	Sold       int64  `json:"sold"`
	Received   int64  `json:"received"`
	FenceToken uint64 `json:"fence_token"`
}

// Audit is the body of GET /v1/skus/{sku}/audit, computed by the service from
// order lines independently of the counters.
type Audit struct {
	SKU        string `json:"sku"`
	Received   int64  `json:"received"`
	Held       int64  `json:"held"`
	Sold       int64  `json:"sold"`
	Available  int64  `json:"available"`
	Oversold   int64  `json:"oversold"`
	LostUnits  int64  `json:"lost_units"`
	Consistent bool   `json:"consistent"`
}

// OrderLine is one line of an order request.
type OrderLine struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// OrderRequest is the body of POST /v1/orders.
type OrderRequest struct {
	Lines       []OrderLine `json:"lines"`
	HoldSeconds int         `json:"hold_seconds,omitempty"`
}

// OrderResponse is the body of a 201 from POST /v1/orders.
type OrderResponse struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
	Lines   []struct {
		SKU        string `json:"sku"`
		Quantity   int    `json:"quantity"`
		FenceToken uint64 `json:"fence_token"`
	} `json:"lines"`
	ExpiresAt string `json:"expires_at"`
}

// APIError is an error answer of the service: {"error":{"code","message"}}.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// Kind classifies the answer to one order.
type Kind int

// The kinds of order answers the runner counts separately.
const (
	KindUnknown         Kind = iota // no definite answer: transport error, timeout, 503 store_unavailable or timeout, or the key still in flight
	KindReserved                    // 201
	KindInsufficient                // 409 insufficient_stock
	KindStaleFence                  // 409 stale_fence
	KindLockUnavailable             // 503 lock_unavailable
	KindError                       // any other answer
)

func (k Kind) String() string {
	switch k {
	case KindReserved:
		return "reserved"
	case KindInsufficient:
		return "insufficient_stock"
	case KindStaleFence:
		return "stale_fence"
	case KindLockUnavailable:
		return "lock_unavailable"
	case KindError:
		return "error"
	}
	return "unknown"
}

// Outcome is what one POST /v1/orders produced.
type Outcome struct {
	Kind   Kind
	Status int    // HTTP status, 0 without an answer
	Code   string // error code of the answer, or the transport error's class
	Order  *OrderResponse
	Err    error // nil for 201
	// RetryAfter is the answer's Retry-After header, "" without one.
	RetryAfter string
}

// Client talks to Stockguard instances over keep-alive connections.
type Client struct {
	http           *http.Client
	adminToken     string
	requestTimeout time.Duration
}

// New returns a client keeping up to idlePerHost idle connections per
// instance, so that C concurrent workers never redial, and bounding each
// request by requestTimeout.
func New(idlePerHost int, adminToken string, requestTimeout time.Duration) *Client {
	tr := &http.Transport{
		Proxy:                 nil, // loopback targets only; never a proxy
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   idlePerHost,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: requestTimeout,
		DisableCompression:    true,
	}
	return &Client{
		http:           &http.Client{Transport: tr},
		adminToken:     adminToken,
		requestTimeout: requestTimeout,
	}
}

// WrapTransport wraps the client's transport, for callers that add to every
// request (chaos marks some with X-Chaos-Pause). Call it before the first
// request.
func (c *Client) WrapTransport(wrap func(http.RoundTripper) http.RoundTripper) {
	c.http.Transport = wrap(c.http.Transport)
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Healthy returns nil when GET base/healthz answers 200.
func (c *Client) Healthy(ctx context.Context, base string) error {
	status, body, err := c.do(ctx, http.MethodGet, base+"/healthz", nil, nil)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("GET %s/healthz: HTTP %d: %s", base, status, truncate(body, 200))
	}
	return nil
}

// Ready returns nil when GET base/readyz answers 200.
func (c *Client) Ready(ctx context.Context, base string) error {
	status, body, err := c.do(ctx, http.MethodGet, base+"/readyz", nil, nil)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("GET %s/readyz: HTTP %d: %s", base, status, truncate(body, 200))
	}
	return nil
}

// PutSKU creates the SKU or sets its available stock.
func (c *Client) PutSKU(ctx context.Context, base, sku string, available int) (SKUState, error) {
	body, _ := json.Marshal(map[string]int{"available": available})
	h := http.Header{"Content-Type": {"application/json"}}
	if c.adminToken != "" {
		h.Set("Authorization", "Bearer "+c.adminToken)
	}
	var s SKUState
	if err := c.getJSON(ctx, http.MethodPut, skuURL(base, sku), body, h, http.StatusOK, &s); err != nil {
		return SKUState{}, fmt.Errorf("put sku %s: %w", sku, err)
	}
	return s, nil
}

// GetSKU reads the SKU's counters.
func (c *Client) GetSKU(ctx context.Context, base, sku string) (SKUState, error) {
	var s SKUState
	if err := c.getJSON(ctx, http.MethodGet, skuURL(base, sku), nil, nil, http.StatusOK, &s); err != nil {
		return SKUState{}, fmt.Errorf("get sku %s: %w", sku, err)
	}
	return s, nil
}

// Audit reads the SKU's audit.
func (c *Client) Audit(ctx context.Context, base, sku string) (Audit, error) {
	var a Audit
	if err := c.getJSON(ctx, http.MethodGet, skuURL(base, sku)+"/audit", nil, nil, http.StatusOK, &a); err != nil {
		return Audit{}, fmt.Errorf("audit sku %s: %w", sku, err)
	}
	return a, nil
}

// PlaceOrder posts body with the idempotency key and classifies the answer.
// It never returns a Go error: failures are part of the Outcome.
func (c *Client) PlaceOrder(ctx context.Context, base, key string, body []byte) Outcome {
	h := http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {key}}
	return c.orderCall(ctx, base+"/v1/orders", body, h, http.StatusCreated)
}

// ConfirmOrder posts a confirm of order id and classifies the answer as
// PlaceOrder does; a 200 is KindReserved, with the order.
func (c *Client) ConfirmOrder(ctx context.Context, base, id string) Outcome {
	return c.orderCall(ctx, base+"/v1/orders/"+url.PathEscape(id)+"/confirm", nil, nil, http.StatusOK)
}

// CancelOrder posts a cancel of order id, as ConfirmOrder.
func (c *Client) CancelOrder(ctx context.Context, base, id string) Outcome {
	return c.orderCall(ctx, base+"/v1/orders/"+url.PathEscape(id)+"/cancel", nil, nil, http.StatusOK)
}

// orderCall posts to an order endpoint and classifies the answer; ok is the
// status of success.
func (c *Client) orderCall(ctx context.Context, u string, body []byte, h http.Header, ok int) Outcome {
	status, hdr, raw, err := c.doHeaders(ctx, http.MethodPost, u, body, h)
	if err != nil {
		return Outcome{Kind: KindUnknown, Code: transportClass(err), Err: err}
	}
	if status == ok {
		var o OrderResponse
		if err := json.Unmarshal(raw, &o); err != nil || o.OrderID == "" {
			return Outcome{Kind: KindError, Status: status, Code: fmt.Sprintf("bad_%d_body", status),
				Err: fmt.Errorf("%d with unreadable body %q: %v", status, truncate(raw, 200), err)}
		}
		return Outcome{Kind: KindReserved, Status: status, Order: &o}
	}
	apiErr := decodeAPIError(status, raw)
	out := Outcome{Kind: KindError, Status: status, Code: apiErr.Code, Err: apiErr, RetryAfter: hdr.Get("Retry-After")}
	switch {
	case status == http.StatusConflict && apiErr.Code == "insufficient_stock":
		out.Kind = KindInsufficient
	case status == http.StatusConflict && apiErr.Code == "stale_fence":
		out.Kind = KindStaleFence
	case status == http.StatusServiceUnavailable && apiErr.Code == "lock_unavailable":
		out.Kind = KindLockUnavailable
	case status == http.StatusConflict && apiErr.Code == "idempotency_key_in_flight",
		// The first attempt may still commit: the outcome is not known yet.
		status == http.StatusServiceUnavailable && (apiErr.Code == "store_unavailable" || apiErr.Code == "timeout"):
		// The database or the deadline failed, possibly after the write was
		// sent (a lost commit acknowledgement): it may have landed.
		out.Kind = KindUnknown
	}
	return out
}

// GetJSON reads u and decodes a 200 answer into v.
func (c *Client) GetJSON(ctx context.Context, u string, v any) error {
	return c.getJSON(ctx, http.MethodGet, u, nil, nil, http.StatusOK, v)
}

// Metrics returns base/metrics as served, in the Prometheus text format.
func (c *Client) Metrics(ctx context.Context, base string) ([]byte, error) {
	status, raw, err := c.do(ctx, http.MethodGet, base+"/metrics", nil, nil)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: HTTP %d", base, status)
	}
	return raw, nil
}

// getJSON performs a request and decodes a want-status answer into v.
func (c *Client) getJSON(ctx context.Context, method, u string, body []byte, h http.Header, want int, v any) error {
	status, raw, err := c.do(ctx, method, u, body, h)
	if err != nil {
		return err
	}
	if status != want {
		return decodeAPIError(status, raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s %s: decode %q: %w", method, u, truncate(raw, 200), err)
	}
	return nil
}

// do sends one request bounded by the request timeout and reads the whole
// (bounded) body so the connection returns to the idle pool.
func (c *Client) do(ctx context.Context, method, u string, body []byte, h http.Header) (int, []byte, error) {
	status, _, raw, err := c.doHeaders(ctx, method, u, body, h)
	return status, raw, err
}

// doHeaders is do that also returns the answer's headers.
func (c *Client) doHeaders(ctx context.Context, method, u string, body []byte, h http.Header) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: read body: %w", method, u, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	return resp.StatusCode, resp.Header, raw, nil
}

// decodeAPIError reads the service's error shape, tolerating anything else.
func decodeAPIError(status int, raw []byte) *APIError {
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &APIError{Status: status}
	if json.Unmarshal(raw, &env) == nil && env.Error.Code != "" {
		e.Code, e.Message = env.Error.Code, env.Error.Message
		return e
	}
	e.Code = fmt.Sprintf("http_%d", status)
	e.Message = truncate(raw, 200)
	return e
}

// transportClass names a transport error for the error breakdown.
func transportClass(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case strings.Contains(err.Error(), "connection refused"):
		return "connection_refused"
	}
	return "transport"
}

func skuURL(base, sku string) string { return base + "/v1/skus/" + url.PathEscape(sku) }

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// Package client is the load tester's view of the Stockguard API, on top of
// the public Go client (package github.com/stockguard/stockguard/client):
// it creates and reads SKUs, reads their audit, places orders with an
// idempotency key and classifies every answer into a Kind. The public
// client's retries are off: the load tester retries by itself, where it
// chooses, so that its tallies count every answer the service gave.
package client

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	api "github.com/stockguard/stockguard/client"
)

// Client talks to Stockguard instances over keep-alive connections: one
// pooled http.Client for all of them, one public client per instance.
type Client struct {
	http           *http.Client
	adminToken     string
	requestTimeout time.Duration

	mu sync.RWMutex
	// of holds the public client of each base URL, made on first use.
	of map[string]*api.Client
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
		// As the public client's own transport: no answer of the service
		// nears it, and net/http's default would buffer 10 MiB.
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
	}
	return &Client{
		http:           &http.Client{Transport: tr},
		adminToken:     adminToken,
		requestTimeout: requestTimeout,
		of:             map[string]*api.Client{},
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

// api returns the public client of base, made once: every one shares c's
// http.Client, so WrapTransport reaches them all.
func (c *Client) api(base string) (*api.Client, error) {
	c.mu.RLock()
	a := c.of[base]
	c.mu.RUnlock()
	if a != nil {
		return a, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.of[base]; a != nil {
		return a, nil
	}
	a, err := api.New(base, api.WithHTTPClient(c.http), api.WithAdminToken(c.adminToken), api.WithRetries(0))
	if err != nil {
		return nil, err
	}
	c.of[base] = a
	return a, nil
}

// Healthy returns nil when GET base/healthz answers 200.
func (c *Client) Healthy(ctx context.Context, base string) error {
	a, err := c.api(base)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	if err := a.Healthz(ctx); err != nil {
		return fmt.Errorf("%s: %w", base, err)
	}
	return nil
}

// Ready returns nil when GET base/readyz answers 200.
func (c *Client) Ready(ctx context.Context, base string) error {
	a, err := c.api(base)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	if err := a.Ready(ctx); err != nil {
		return fmt.Errorf("%s: %w", base, err)
	}
	return nil
}

// PutSKU creates the SKU or sets its available stock.
func (c *Client) PutSKU(ctx context.Context, base, sku string, available int) (SKUState, error) {
	a, err := c.api(base)
	if err != nil {
		return SKUState{}, fmt.Errorf("put sku %s: %w", sku, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	s, err := a.SetStock(ctx, sku, int64(available))
	if err != nil {
		return SKUState{}, fmt.Errorf("put sku %s: %w", sku, err)
	}
	return *s, nil
}

// GetSKU reads the SKU's counters.
func (c *Client) GetSKU(ctx context.Context, base, sku string) (SKUState, error) {
	a, err := c.api(base)
	if err != nil {
		return SKUState{}, fmt.Errorf("get sku %s: %w", sku, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	s, err := a.SKU(ctx, sku)
	if err != nil {
		return SKUState{}, fmt.Errorf("get sku %s: %w", sku, err)
	}
	return *s, nil
}

// Audit reads the SKU's audit.
func (c *Client) Audit(ctx context.Context, base, sku string) (Audit, error) {
	a, err := c.api(base)
	if err != nil {
		return Audit{}, fmt.Errorf("audit sku %s: %w", sku, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	au, err := a.Audit(ctx, sku)
	if err != nil {
		return Audit{}, fmt.Errorf("audit sku %s: %w", sku, err)
	}
	return *au, nil
}

// PlaceOrder posts body, an encoded OrderRequest, with the idempotency key
// and classifies the answer. It never returns a Go error: failures are part
// of the Outcome.
func (c *Client) PlaceOrder(ctx context.Context, base, key string, body []byte) Outcome {
	a, err := c.api(base)
	if err != nil {
		return Outcome{Kind: KindError, Code: "bad_url", Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	o, err := a.PlaceOrderJSON(ctx, key, body)
	return outcome(o, err, http.StatusCreated)
}

// ConfirmOrder posts a confirm of order id and classifies the answer as
// PlaceOrder does; a 200 is KindReserved, with the order.
func (c *Client) ConfirmOrder(ctx context.Context, base, id string) Outcome {
	return c.settle(ctx, base, id, (*api.Client).Confirm)
}

// CancelOrder posts a cancel of order id, as ConfirmOrder.
func (c *Client) CancelOrder(ctx context.Context, base, id string) Outcome {
	return c.settle(ctx, base, id, (*api.Client).Cancel)
}

// settle runs a confirm or a cancel of order id.
func (c *Client) settle(ctx context.Context, base, id string,
	call func(*api.Client, context.Context, string) (*api.Order, error)) Outcome {
	a, err := c.api(base)
	if err != nil {
		return Outcome{Kind: KindError, Code: "bad_url", Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	o, err := call(a, ctx, id)
	return outcome(o, err, http.StatusOK)
}

// GetJSON reads u, a full URL of an instance, and decodes a 200 answer
// into v.
func (c *Client) GetJSON(ctx context.Context, u string, v any) error {
	p, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	a, err := c.api((&url.URL{Scheme: p.Scheme, User: p.User, Host: p.Host}).String())
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	return a.GetJSON(ctx, p.RequestURI(), v)
}

// Metrics returns base/metrics as served, in the Prometheus text format.
func (c *Client) Metrics(ctx context.Context, base string) ([]byte, error) {
	a, err := c.api(base)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	raw, err := a.Metrics(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", base, err)
	}
	return raw, nil
}

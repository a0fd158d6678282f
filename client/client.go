// Package client is the Go client of Stockguard's HTTP API (api/openapi.yaml):
// stock levels and their audit, orders with confirm and cancel, and the
// health endpoints.
//
// Every call takes a context and is retried a bounded number of times when
// the service says a retry may succeed: a 503 (lock_unavailable,
// store_unavailable, overloaded, timeout, not_ready) after its Retry-After, a
// 409 idempotency_key_in_flight after a short backoff, and a request that got
// no answer at all. Retrying is safe for every call: setting stock writes an
// absolute value, confirming or cancelling twice is not an error, and an
// order carries one idempotency key over all its attempts, so a retry can
// only replay it. Errors the service answered are *APIError values that
// match the sentinel of their code with errors.Is.
package client

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of the options.
const (
	// DefaultRetries is how many times a call is retried after its first
	// attempt.
	DefaultRetries = 3
	// DefaultMaxRetryWait bounds one wait between attempts, whatever
	// Retry-After asks for.
	DefaultMaxRetryWait = 10 * time.Second
	// DefaultInFlightBackoff is the first wait after a 409
	// idempotency_key_in_flight (the service gives no Retry-After for it);
	// it doubles on each further one.
	DefaultInFlightBackoff = 50 * time.Millisecond
)

// Client calls one Stockguard service (or a load balancer in front of
// several instances). It is safe for concurrent use.
type Client struct {
	// baseURL is the base URL as text, with no trailing slash: every
	// request's URL is it and an escaped path, joined without formatting.
	baseURL         string
	http            *http.Client
	adminToken      string
	retries         int
	maxRetryWait    time.Duration
	inFlightBackoff time.Duration
	observer        Observer
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces the http.Client. The default has no timeout of its
// own (each call's context bounds it) and keeps up to 64 idle connections
// per host, so concurrent callers reuse connections.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithAdminToken sends Authorization: Bearer token on SetStock, for services
// started with --admin-token. Default: none.
func WithAdminToken(token string) Option { return func(c *Client) { c.adminToken = token } }

// WithRetries sets how many times a call is retried after its first attempt;
// 0 turns retries off, so every answer reaches the caller. Default
// DefaultRetries.
func WithRetries(n int) Option { return func(c *Client) { c.retries = max(0, n) } }

// WithMaxRetryWait bounds one wait between attempts. Default
// DefaultMaxRetryWait.
func WithMaxRetryWait(d time.Duration) Option { return func(c *Client) { c.maxRetryWait = d } }

// WithInFlightBackoff sets the first wait after a 409
// idempotency_key_in_flight. Default DefaultInFlightBackoff.
func WithInFlightBackoff(d time.Duration) Option { return func(c *Client) { c.inFlightBackoff = d } }

// WithObserver calls o after every attempt, retried or not. Default: none.
func WithObserver(o Observer) Option { return func(c *Client) { c.observer = o } }

// New returns a client of the service at baseURL (for example
// "http://127.0.0.1:8080").
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port]", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{baseURL: u.String(), retries: DefaultRetries, maxRetryWait: DefaultMaxRetryWait,
		inFlightBackoff: DefaultInFlightBackoff}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		c.http = defaultHTTPClient()
	}
	return c, nil
}

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: t}
}

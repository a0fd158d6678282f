// Package client is the Go client of Stockguard's HTTP API (api/openapi.yaml):
// stock levels and their audit, orders with confirm and cancel, and the
// health endpoints.
//
// Every call takes a context and is retried when the service says a retry
// may succeed: a 503 (lock_unavailable, store_unavailable, overloaded,
// timeout, not_ready) after its Retry-After and a request that got no
// answer at all, up to WithRetries times; a 409 idempotency_key_in_flight,
// whose first request is still running, after a short backoff for up to
// WithInFlightWait in all, whatever the retries left. Reads, confirm and
// cancel are safe to repeat (confirming or cancelling twice is not an
// error), and an order carries one idempotency key over all its attempts,
// so a retry can only replay it. SetStock is the exception: it sets an
// absolute value, and a repeat of one that landed would set it again over
// the orders placed in between, so it is retried only after an answer that
// says nothing was written (503 lock_unavailable or overloaded).
// SetStockIf, which sets the value only over the counters the caller read,
// received among them, refuses its own repeat (stock_changed: received
// moved by the change it made) and is retried as reads are.
//
// Errors the service answered are *APIError values that match the sentinel
// of their code with errors.Is. A write that may have been applied though
// it failed (no answer, a lost commit acknowledgement, or any failure after
// an attempt whose answer was lost) also matches ErrOutcomeUnknown. A
// request the client can tell the service would refuse (a SKU name off the
// pattern, an Idempotency-Key that is not 1..255 bytes of printable ASCII or
// that starts or ends with a space, a quantity, stock level, hold or line
// count out of range) is not sent: its error matches ErrInvalidRequest too,
// and is no *APIError. So is an order
// id that is no uuid, such as "": the service would answer 404, which reads
// as an order that vanished rather than the caller's bug.
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
	// DefaultInFlightBackoff is the first wait of the client's own backoff,
	// where the service gives no Retry-After: after a 409
	// idempotency_key_in_flight and after an attempt that got no answer. It
	// doubles on each further one.
	DefaultInFlightBackoff = 50 * time.Millisecond
	// DefaultInFlightWait bounds the time a call waits out 409
	// idempotency_key_in_flight, from the first: the service's default lock
	// wait, the longest its first request waits for the locks before it
	// answers, and so by and large the longest it runs.
	DefaultInFlightWait = 5 * time.Second
)

// minInFlightBackoff is the shortest first wait WithInFlightBackoff takes.
const minInFlightBackoff = time.Millisecond

// maxInFlightBackoff bounds one wait for a key in flight: the first request
// ends at a moment nobody announces, and the repeat should come soon after.
const maxInFlightBackoff = 500 * time.Millisecond

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
	inFlightWait    time.Duration
	observer        Observer
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces the http.Client. The default has no timeout of its
// own (each call's context bounds it), keeps up to 64 idle connections per
// host, so concurrent callers reuse connections, and reads at most 64 KiB
// of an answer's headers (past that, the attempt got no answer), as the
// client reads at most 1 MiB of its body. A replacement keeps its own
// bounds: http.Transport's MaxResponseHeaderBytes is 10 MiB unless set.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithAdminToken sends Authorization: Bearer token on the calls a service
// started with --admin-token guards (SetStock, and GetJSON's test-only
// paths); New refuses a token with a control byte, which no header can
// carry. Default: none.
func WithAdminToken(token string) Option { return func(c *Client) { c.adminToken = token } }

// admin is the header of a guarded call: the bearer token, if any.
func (c *Client) admin() http.Header {
	h := http.Header{}
	if c.adminToken != "" {
		h.Set("Authorization", "Bearer "+c.adminToken)
	}
	return h
}

// WithRetries sets how many times a call is retried after a 503 or an
// attempt that got no answer (the waits for a key in flight are bounded by
// WithInFlightWait instead); 0 turns every retry off, those included, so
// every answer reaches the caller. Default DefaultRetries.
func WithRetries(n int) Option { return func(c *Client) { c.retries = max(0, n) } }

// WithMaxRetryWait bounds one wait between attempts. Default
// DefaultMaxRetryWait.
func WithMaxRetryWait(d time.Duration) Option { return func(c *Client) { c.maxRetryWait = d } }

// WithInFlightBackoff sets the first wait of the client's own backoff, used
// where the service gives no Retry-After: after a 409
// idempotency_key_in_flight and after an attempt that got no answer. A
// value of 0 or less means the default, and one below a millisecond is
// raised to it: a backoff that doubles from nothing stays nothing, and the
// waits for a key in flight, bounded by time rather than by count, would
// repeat the request thousands of times a second. Default
// DefaultInFlightBackoff.
func WithInFlightBackoff(d time.Duration) Option {
	return func(c *Client) {
		if d <= 0 {
			d = DefaultInFlightBackoff
		}
		c.inFlightBackoff = max(d, minInFlightBackoff)
	}
}

// WithInFlightWait bounds how long a call waits out 409
// idempotency_key_in_flight, counted from the first; past it, or once the
// call's context ends, the caller gets the 409. Default DefaultInFlightWait.
func WithInFlightWait(d time.Duration) Option { return func(c *Client) { c.inFlightWait = d } }

// WithObserver calls o after every attempt, retried or not. Default: none.
func WithObserver(o Observer) Option { return func(c *Client) { c.observer = o } }

// New returns a client of the service at baseURL (for example
// "http://127.0.0.1:8080", or with a path prefix "https://host/stock"). A
// query or a fragment is refused: request paths are appended to the base
// URL as text, and would land inside them.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port][/path]", baseURL)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, fmt.Errorf("client: base URL %q: no query or fragment, want http(s)://host[:port][/path]", baseURL)
	}
	u.Path, u.RawPath = strings.TrimSuffix(u.Path, "/"), strings.TrimSuffix(u.RawPath, "/")
	c := &Client{baseURL: u.String(), retries: DefaultRetries, maxRetryWait: DefaultMaxRetryWait,
		inFlightBackoff: DefaultInFlightBackoff, inFlightWait: DefaultInFlightWait}
	for _, o := range opts {
		o(c)
	}
	if err := checkHeader(c.adminToken); err != nil {
		return nil, fmt.Errorf("client: admin token: %w", err)
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
	t.MaxResponseHeaderBytes = maxAnswerHeader
	return &http.Client{Transport: t}
}

package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	api "github.com/stockguard/stockguard/client"
)

// Kind classifies the answer to one order.
type Kind int

// The kinds of order answers the runner counts separately.
const (
	KindUnknown         Kind = iota // no definite answer: transport error, timeout, the key still in flight, any 5xx but a 503 lock_unavailable or overloaded, or a 201 (200) whose order cannot be read
	KindReserved                    // 201
	KindInsufficient                // 409 insufficient_stock
	KindStaleFence                  // 409 stale_fence
	KindLockUnavailable             // 503 lock_unavailable
	KindError                       // any other answer, among them 503 overloaded (nothing placed), and a request never sent (Status 0)
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

// Settled reports whether the answer settles what became of the order its
// idempotency key names, whatever earlier attempts with the key did: a 2xx,
// or a 4xx refusal (the service answers a request that did not go through
// from the order holding its key, if there is one). No answer, a key still
// in flight and a 5xx leave it open: every 503 (each with Retry-After) sheds
// or fails this attempt — overloaded, shutting down, a lock or store
// outage — without deciding anything about an earlier one still running.
//
// So does a 409 stale_fence: this attempt's lease was overtaken, and the
// newer holder may be an earlier attempt with the same key, on another
// instance, about to commit. An insufficient_stock settles it only because
// a load test's stock never grows while it runs (no cancels, holds that
// outlast the run): an earlier attempt still waiting would find no more.
//
// A request never sent (Status 0: not_sent, bad_url) settles it too: it
// applied nothing, and every resend would be refused alike.
func (o Outcome) Settled() bool {
	if o.Kind == KindUnknown || o.Kind == KindStaleFence {
		return false
	}
	return o.Status < 500
}

// Answered reports whether this attempt was decided: by the service,
// anything but no answer, an answer that cannot be read, a key still in
// flight, or a 5xx; or by the client, which never sent it. A 409
// stale_fence is one, though it settles nothing about another attempt
// (Settled).
func (o Outcome) Answered() bool {
	return o.Kind == KindStaleFence || o.Settled()
}

// outcome classifies the public client's answer to one order call; ok is
// the call's success status.
func outcome(o *api.Order, err error, ok int) Outcome {
	// A success status whose order cannot be read says the order was
	// placed (confirmed, cancelled), not what it is: unknown, for a resend
	// with the key to tell.
	if err == nil {
		if o.ID == "" {
			return Outcome{Kind: KindUnknown, Status: ok, Code: badBody(ok),
				Err: fmt.Errorf("%d answer without an order_id: %+v", ok, *o)}
		}
		return Outcome{Kind: KindReserved, Status: ok, Order: response(o)}
	}
	ae := apiError(err)
	switch {
	case ae != nil:
	case errors.Is(err, api.ErrBadAnswer):
		return Outcome{Kind: KindUnknown, Status: ok, Code: badBody(ok), Err: err}
	case errors.Is(err, api.ErrInvalidRequest):
		// Refused by the public client before it was sent (a key or an
		// order id the service would refuse): nothing was applied.
		return Outcome{Kind: KindError, Code: "not_sent", Err: err}
	default:
		return Outcome{Kind: KindUnknown, Code: transportClass(err), Err: err}
	}
	out := Outcome{Kind: KindError, Status: ae.Status, Code: ae.Code, Err: err, RetryAfter: ae.Header.Get("Retry-After")}
	if out.Code == "" {
		// Not the API's error body (a proxy's, say): named by its status.
		out.Code = "http_" + strconv.Itoa(ae.Status)
	}
	switch {
	case ae.Status == http.StatusConflict && ae.Code == "insufficient_stock":
		out.Kind = KindInsufficient
	case ae.Status == http.StatusConflict && ae.Code == "stale_fence":
		out.Kind = KindStaleFence
	case ae.Status == http.StatusServiceUnavailable && ae.Code == "lock_unavailable":
		out.Kind = KindLockUnavailable
	case ae.Status == http.StatusServiceUnavailable && ae.Code == "overloaded":
		// Shed before it was handled: nothing was placed.
	case ae.Status == http.StatusConflict && ae.Code == "idempotency_key_in_flight",
		// The first attempt may still commit: the outcome is not known yet.
		ae.Status >= 500:
		// Every other 5xx — store_unavailable, timeout, a 500 from a bug, a
		// proxy's 502 or 504 — may come after the write was sent (a lost
		// commit acknowledgement, a connection cut behind a proxy): the
		// order may have landed, and only a resend with its key can tell.
		out.Kind = KindUnknown
	}
	return out
}

// apiError finds the *APIError in err. The public client wraps it once; a
// walk down single wraps finds it there without errors.As, whose target
// would escape to the heap on every refused order.
func apiError(err error) *APIError {
	for e := err; e != nil; {
		if ae, ok := e.(*APIError); ok {
			return ae
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	return apiErrorAs(err)
}

// apiErrorAs is errors.As, for the rarer chains with several wraps.
func apiErrorAs(err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}

// response is o in the load tester's shape: the quantities as the requests
// have them, the expiry as the service wrote it (RFC 3339).
func response(o *api.Order) *OrderResponse {
	r := &OrderResponse{OrderID: o.ID, Status: o.Status, ExpiresAt: o.ExpiresAt.Format(time.RFC3339Nano)}
	r.Lines = make([]struct {
		SKU        string `json:"sku"`
		Quantity   int    `json:"quantity"`
		FenceToken uint64 `json:"fence_token"`
	}, len(o.Lines))
	for i, l := range o.Lines {
		r.Lines[i].SKU, r.Lines[i].Quantity, r.Lines[i].FenceToken = l.SKU, int(l.Quantity), l.FenceToken
	}
	return r
}

func badBody(status int) string { return "bad_" + strconv.Itoa(status) + "_body" }

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

package client

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Sentinels of the API's error codes: errors.Is(err, ErrInsufficientStock)
// holds for an *APIError with that code. ErrIdempotencyKeyInFlight, once
// the client's waits for it are over (WithInFlightWait), means the first
// request with the key still ran: the order's outcome is unknown, and the
// error matches ErrOutcomeUnknown too. Retry with the same key to learn it;
// a new key could place the order twice.
// ErrStockChanged is SetStockIf's refusal: the SKU's counters were not the
// ones the caller read, and nothing was written (see SetStockIf for when
// it may follow the call's own write).
var (
	ErrInvalidRequest         = errors.New("invalid_request")
	ErrUnauthorized           = errors.New("unauthorized")
	ErrUnknownSKU             = errors.New("unknown_sku")
	ErrUnknownOrder           = errors.New("unknown_order")
	ErrNotFound               = errors.New("not_found")
	ErrMethodNotAllowed       = errors.New("method_not_allowed")
	ErrInsufficientStock      = errors.New("insufficient_stock")
	ErrStaleFence             = errors.New("stale_fence")
	ErrStockChanged           = errors.New("stock_changed")
	ErrInvalidTransition      = errors.New("invalid_transition")
	ErrIdempotencyKeyInFlight = errors.New("idempotency_key_in_flight")
	ErrBodyTooLarge           = errors.New("body_too_large")
	ErrUnsupportedMediaType   = errors.New("unsupported_media_type")
	ErrIdempotencyKeyReused   = errors.New("idempotency_key_reused")
	ErrLockUnavailable        = errors.New("lock_unavailable")
	ErrStoreUnavailable       = errors.New("store_unavailable")
	ErrOverloaded             = errors.New("overloaded")
	ErrNotReady               = errors.New("not_ready")
	ErrTimeout                = errors.New("timeout")
	ErrInternal               = errors.New("internal")
)

// ErrOutcomeUnknown matches the error of a write (an order, a confirm or
// cancel, a stock level) that may have been applied though the call
// failed: its last attempt got no answer, none it could read, or a 5xx
// other than 503 lock_unavailable and overloaded (store_unavailable,
// timeout: a commit whose acknowledgement was lost); an order's key was
// still in flight once the waits were over; or an earlier attempt ended so
// and the last answer does not settle what became of it. Only a 4xx that
// any attempt of the same request would get does (unknown_sku,
// idempotency_key_reused, unauthorized, ...): a 503 overloaded or
// lock_unavailable says only that the last attempt wrote nothing, and an
// insufficient_stock, stale_fence, stock_changed or invalid_request may
// answer the last attempt alone while an earlier one lands or has landed.
// The error still matches the last answer's sentinel, and errors.As finds
// its *APIError. Place the order again under IdempotencyKeyOf(err), which
// answers with it if it was placed and places it if not; repeat a confirm
// or cancel; read the SKU before setting its stock again. A read (a GET)
// changes nothing, and its error never matches.
var ErrOutcomeUnknown = errors.New("client: outcome unknown")

// IdempotencyKeyOf returns the Idempotency-Key that the failed call behind
// err sent on every attempt, the one PlaceOrder made included, and "" for
// a call that sent none or was not sent at all. After an order's unknown
// outcome, place it again under this key: the answer is the order if the
// failed call placed it, and a new order if not, never both.
func IdempotencyKeyOf(err error) string {
	var ce *callError
	if errors.As(err, &ce) {
		return ce.key
	}
	return ""
}

// ErrBadAnswer matches the error of an answer that has the call's success
// status but a body that does not decode, lacks what every such answer has
// (an order's uuid, a SKU's name: a null or {} decodes without error), or
// is longer than the client reads (1 MiB): the service answered, and said
// something this client cannot read. It is retried as an attempt that got
// no answer.
var ErrBadAnswer = errors.New("client: undecodable answer")

// codes maps each code the API answers with to its sentinel.
var codes = func() map[string]error {
	m := map[string]error{}
	for _, e := range []error{ErrInvalidRequest, ErrUnauthorized, ErrUnknownSKU, ErrUnknownOrder, ErrNotFound,
		ErrMethodNotAllowed, ErrInsufficientStock, ErrStaleFence, ErrStockChanged, ErrInvalidTransition,
		ErrIdempotencyKeyInFlight, ErrBodyTooLarge, ErrUnsupportedMediaType, ErrIdempotencyKeyReused, ErrLockUnavailable,
		ErrStoreUnavailable, ErrOverloaded, ErrNotReady, ErrTimeout, ErrInternal} {
		m[e.Error()] = e
	}
	return m
}()

// APIError is an error answer of the service.
type APIError struct {
	// Status is the HTTP status.
	Status int
	// Code is the API's error code (error.code); "" for an answer without
	// the API's error body (a proxy's, for instance).
	Code    string
	Message string
	// SKU is the SKU the error is about (insufficient_stock, unknown_sku,
	// stale_fence), when the service named it.
	SKU string
	// Requested and Available are insufficient_stock's quantities.
	Requested, Available int64
	// RequestID is the request's X-Request-Id, for the service's log.
	RequestID string
	// RetryAfter is the answer's Retry-After (every 503 has one); 0 when
	// absent.
	RetryAfter time.Duration
	// Header is the answer's header as received, for what the fields above
	// leave out (Retry-After exactly as sent, to tell a 0 from none).
	Header http.Header
}

// Error reports the status, code, SKU and message.
func (e *APIError) Error() string {
	s := fmt.Sprintf("stockguard: %d %s", e.Status, e.Code)
	if e.SKU != "" {
		s += fmt.Sprintf(" (sku %q)", e.SKU)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns the sentinel of e's code, so that errors.Is matches it.
func (e *APIError) Unwrap() error { return codes[e.Code] }

// retryable tells whether the service said a later attempt may succeed, as
// every 503 does (a key in flight is waited out apart: see retryWait).
func (e *APIError) retryable() bool { return e.Status == http.StatusServiceUnavailable }

// settles tells whether the answer, a 4xx, is one that every attempt of
// the call's request would get, so that it tells what became of an earlier
// attempt whose answer was lost too: nothing. Not so a key in flight, a
// stale_fence (the earlier attempt may hold the newer lease, on another
// instance), an insufficient_stock (the earlier attempt may have taken the
// stock, or still wait for stock that a cancel returns), a stock_changed
// (the earlier attempt may have made the change) nor an invalid_request,
// which the service also answers to a body that did not arrive within its
// read timeout; nor a 4xx without the API's error body, a proxy's.
func (e *APIError) settles() bool {
	if e.Status < 400 || e.Status >= 500 || e.Code == "" {
		return false
	}
	switch e.Code {
	case ErrIdempotencyKeyInFlight.Error(), ErrStaleFence.Error(), ErrInsufficientStock.Error(),
		ErrStockChanged.Error(), ErrInvalidRequest.Error():
		return false
	}
	return true
}

// unwritten tells whether the answer says the request wrote nothing: it
// was turned away on arrival (overloaded), or its locks were not had or
// not kept, so its write never ran or failed (lock_unavailable).
// store_unavailable and timeout do not: they may come after a write that
// landed, whose acknowledgement was lost.
func (e *APIError) unwritten() bool {
	return e.Status == http.StatusServiceUnavailable &&
		(e.Code == ErrLockUnavailable.Error() || e.Code == ErrOverloaded.Error())
}

// errorBody is the API's error answer.
type errorBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		SKU       string `json:"sku"`
		Requested int64  `json:"requested"`
		Available int64  `json:"available"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		// Capped before the product, which would wrap past 292 years.
		return time.Duration(min(s, int64(math.MaxInt64/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

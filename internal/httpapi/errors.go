package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
)

// Errors that only the HTTP layer raises.
var (
	errUnauthorized = errors.New("missing or wrong admin bearer token")
	errNotFound     = errors.New("no such route")
	errMethod       = errors.New("method not allowed on this route")
	errBodyTooLarge = errors.New("request body is larger than 64 KiB")
	errMediaType    = errors.New("request body must be application/json")
	// Content-Encoding is not decoded: a gzip body would reach the decoder
	// as binary, or worse, as JSON that means something else.
	errContentEncoding = errors.New("request body must not be content-coded: Content-Encoding other than identity")
	errClientGone      = errors.New("request cancelled by the client")
	// The body errors say nothing of the socket: its text names the
	// instance's and the peer's addresses, which are for the log.
	errBodyTimeout      = fmt.Errorf("%w: request body not received within the server's read timeout", inventory.ErrInvalid)
	errBodyUnreadable   = fmt.Errorf("%w: request body could not be read", inventory.ErrInvalid)
	errServiceUnhealthy = errors.New("not ready: database")
	errOverloaded       = fmt.Errorf("too many requests in flight on this instance: %w", inventory.ErrOverloaded)
	errBodyOverloaded   = fmt.Errorf("too many request body bytes buffered on this instance: %w", inventory.ErrOverloaded)
)

// errorTable is the one place that knows HTTP statuses; first match wins,
// so specific errors come before the general ones they may wrap.
var errorTable = []struct {
	err    error
	status int
	code   string
}{
	{inventory.ErrInvalid, http.StatusBadRequest, "invalid_request"},
	// A name the SKU pattern allows that a lock backend still refuses: the
	// request's to change, not a fault of the service.
	{lock.ErrInvalidKey, http.StatusBadRequest, "invalid_request"},
	{errUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{inventory.ErrUnknownSKU, http.StatusNotFound, "unknown_sku"},
	{inventory.ErrUnknownOrder, http.StatusNotFound, "unknown_order"},
	{errNotFound, http.StatusNotFound, "not_found"},
	{errMethod, http.StatusMethodNotAllowed, "method_not_allowed"},
	{inventory.ErrInsufficientStock, http.StatusConflict, "insufficient_stock"},
	{inventory.ErrStaleFence, http.StatusConflict, "stale_fence"},
	{inventory.ErrStockChanged, http.StatusConflict, "stock_changed"},
	{inventory.ErrInvalidTransition, http.StatusConflict, "invalid_transition"},
	// A lost lease is the answer whatever else the write ran into: an order
	// of a batch whose lease was lost while a replay's key was taken must
	// not be told its own (absent) key is in flight.
	{lock.ErrLeaseLost, http.StatusServiceUnavailable, "lock_unavailable"},
	{inventory.ErrIdempotencyInFlight, http.StatusConflict, "idempotency_key_in_flight"},
	{errBodyTooLarge, http.StatusRequestEntityTooLarge, "body_too_large"},
	{errMediaType, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	{errContentEncoding, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	{inventory.ErrIdempotencyReused, http.StatusUnprocessableEntity, "idempotency_key_reused"},
	{lock.ErrUnavailable, http.StatusServiceUnavailable, "lock_unavailable"},
	{lock.ErrNotAcquired, http.StatusServiceUnavailable, "lock_unavailable"},
	{inventory.ErrStoreUnavailable, http.StatusServiceUnavailable, "store_unavailable"},
	{inventory.ErrOverloaded, http.StatusServiceUnavailable, "overloaded"},
	// Writers the lock failed to serialise deadlocked: as retryable as a busy lock.
	{inventory.ErrConflict, http.StatusServiceUnavailable, "lock_unavailable"},
	{errServiceUnhealthy, http.StatusServiceUnavailable, "not_ready"},
	{errClientGone, 499, "client_closed_request"},
	{context.Canceled, 499, "client_closed_request"},
	{context.DeadlineExceeded, http.StatusServiceUnavailable, "timeout"},
}

// opaque errors answer with the sentinel's own message: their causes name
// servers (a lock node's address, a database's host), users and relations,
// which are for the log only (and /readyz answers anyone).
// errServiceUnhealthy names the one part readiness checks: the lock backend
// never makes an instance unready (see readyz).
var opaque = []error{inventory.ErrStoreUnavailable, errServiceUnhealthy,
	lock.ErrLeaseLost, lock.ErrUnavailable, lock.ErrNotAcquired, inventory.ErrConflict}

// apiError is the body of every error answer.
type apiError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	SKU       string `json:"sku,omitempty"`
	Requested *int64 `json:"requested,omitempty"`
	Available *int64 `json:"available,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// classify returns the status and body for err; unknown errors are 500s
// whose details stay in the log, like those of opaque rows.
func classify(err error) (int, apiError) {
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			body := apiError{Code: e.code, Message: err.Error()}
			if slices.Contains(opaque, e.err) {
				body.Message = e.err.Error()
			}
			var se *inventory.StockError
			var ke *inventory.SKUError
			switch {
			case errors.As(err, &se):
				body.SKU, body.Requested, body.Available = se.SKU, &se.Requested, &se.Available
			case errors.As(err, &ke):
				body.SKU = ke.SKU
			}
			return e.status, body
		}
	}
	return http.StatusInternalServerError, apiError{Code: "internal", Message: "internal error"}
}

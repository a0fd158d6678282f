package client

import (
	"fmt"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
)

// The client refuses a request beyond the API's limits itself, by the
// service's own rules (internal/inventory's validation, which the handlers
// run): that saves a round trip, and a key that no header can carry would
// otherwise fail in the transport, as if no answer came, and be retried.

// notSent is the error of a request the service would answer 400
// invalid_request, so the client never sent it: it matches
// ErrInvalidRequest and is no *APIError, as no answer came.
func notSent(op string, err error) error {
	return &callError{op: op, err: fmt.Errorf("not sent: %w: %v", ErrInvalidRequest, err)}
}

// maxHoldSeconds is the longest hold the service takes, in seconds.
const maxHoldSeconds = int64(inventory.MaxHold / time.Second)

// checkOrder checks what the service checks of an order's lines and hold
// before it is placed (its key is PlaceOrderJSON's to check).
func checkOrder(req OrderRequest) error {
	// Checked as a number of seconds, as the service checks it: a product
	// in nanoseconds wraps, and 60+1<<55 seconds would read as 60.
	if h := int64(req.HoldSeconds); h < 0 || h > maxHoldSeconds {
		return fmt.Errorf("hold_seconds must be in 1..%d (or 0 for the default), got %d", maxHoldSeconds, h)
	}
	r := inventory.PlaceRequest{Hold: time.Duration(req.HoldSeconds) * time.Second}
	for _, l := range req.Lines {
		r.Lines = append(r.Lines, inventory.LineRequest{SKU: l.SKU, Quantity: l.Quantity})
	}
	return r.Validate()
}

// checkHeader checks v as a header value: net/http refuses a control byte
// other than tab (after a newline, a header could be smuggled) before
// anything is sent, so no attempt could send it.
func checkHeader(v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Errorf("byte %d is 0x%02x, which no header value may carry", i, c)
		}
	}
	return nil
}

package httpapi

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
		sku    string
	}{
		{fmt.Errorf("x: %w", inventory.ErrInvalid), 400, "invalid_request", ""},
		{errUnauthorized, 401, "unauthorized", ""},
		{&inventory.SKUError{SKU: "a", Err: inventory.ErrUnknownSKU}, 404, "unknown_sku", "a"},
		{inventory.ErrUnknownOrder, 404, "unknown_order", ""},
		{&inventory.StockError{SKU: "b", Requested: 3, Available: 1}, 409, "insufficient_stock", "b"},
		{fmt.Errorf("w: %w", &inventory.SKUError{SKU: "c", Err: inventory.ErrStaleFence}), 409, "stale_fence", "c"},
		{&inventory.TransitionError{From: inventory.StatusCancelled, To: inventory.StatusConfirmed}, 409, "invalid_transition", ""},
		{inventory.ErrIdempotencyInFlight, 409, "idempotency_key_in_flight", ""},
		{errBodyTooLarge, 413, "body_too_large", ""},
		{errMediaType, 415, "unsupported_media_type", ""},
		{inventory.ErrIdempotencyReused, 422, "idempotency_key_reused", ""},
		{fmt.Errorf("redlock: %w", lock.ErrUnavailable), 503, "lock_unavailable", ""},
		{fmt.Errorf("%w: waited", lock.ErrNotAcquired), 503, "lock_unavailable", ""},
		{fmt.Errorf("%w: ttl", lock.ErrLeaseLost), 503, "lock_unavailable", ""},
		{fmt.Errorf("pg: %w", inventory.ErrConflict), 503, "lock_unavailable", ""},
		{fmt.Errorf("boom"), http.StatusInternalServerError, "internal", ""},
	}
	for _, c := range cases {
		status, body := classify(c.err)
		if status != c.status || body.Code != c.code || body.SKU != c.sku {
			t.Errorf("classify(%v) = %d %q sku %q, want %d %q sku %q", c.err, status, body.Code, body.SKU, c.status, c.code, c.sku)
		}
	}
	if _, body := classify(fmt.Errorf("secret detail")); body.Message != "internal error" {
		t.Errorf("a 500 leaks its cause: %q", body.Message)
	}
}

func TestCheckKeys(t *testing.T) {
	fields := map[string]bool{"lines": true, "sku": true, "quantity": true}
	cases := []struct {
		body string
		ok   bool
	}{
		{`{"lines":[{"sku":"a","quantity":1},{"sku":"b","quantity":2}]}`, true},
		{`{"lines":[{"sku":"a","quantity":1}],"lines":[]}`, false},
		{`{"lines":[{"sku":"a","sku":"b"}]}`, false},
		{`{"lines":[{"sku":"a"},{"sku":"b"}]}`, true}, // same key in sibling objects is fine
		{`{"Lines":[]}`, false},
		{`{"lines":[{"sku":{"x":1}}]}`, false},
		{`{"lines":[[{"sku":"a"}],{"quantity":1}]}`, true},
		{`{"lines":"sku"}`, true}, // a string value is not a key
	}
	for _, c := range cases {
		if err := checkKeys([]byte(c.body), fields); (err == nil) != c.ok {
			t.Errorf("checkKeys(%s) = %v, want ok=%v", c.body, err, c.ok)
		}
	}
}

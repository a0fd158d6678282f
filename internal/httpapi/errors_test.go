package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/reservation"
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
		{&inventory.SKUError{SKU: "d", Err: fmt.Errorf("%w: available is 7, not the expected 10", inventory.ErrStockChanged)}, 409, "stock_changed", "d"},
		{&inventory.TransitionError{From: inventory.StatusCancelled, To: inventory.StatusConfirmed}, 409, "invalid_transition", ""},
		{inventory.ErrIdempotencyInFlight, 409, "idempotency_key_in_flight", ""},
		{errBodyTooLarge, 413, "body_too_large", ""},
		{errMediaType, 415, "unsupported_media_type", ""},
		{inventory.ErrIdempotencyReused, 422, "idempotency_key_reused", ""},
		{fmt.Errorf("redlock: %w", lock.ErrUnavailable), 503, "lock_unavailable", ""},
		{fmt.Errorf("%w: waited", lock.ErrNotAcquired), 503, "lock_unavailable", ""},
		{fmt.Errorf("%w: ttl", lock.ErrLeaseLost), 503, "lock_unavailable", ""},
		{fmt.Errorf("pg: %w", inventory.ErrConflict), 503, "lock_unavailable", ""},
		// The lease-lost order of a batch that also met a replay's taken key.
		{fmt.Errorf("%w (%w)", lock.ErrLeaseLost, &inventory.KeyTakenError{Keys: []string{"k"}}), 503, "lock_unavailable", ""},
		{fmt.Errorf("postgres: claim: %w: conn closed", inventory.ErrStoreUnavailable), 503, "store_unavailable", ""},
		{fmt.Errorf("postgres: write: %w: %w", inventory.ErrInvalid, errors.New("invalid byte sequence")), 400, "invalid_request", ""},
		{errOverloaded, 503, "overloaded", ""},
		{reservation.ErrClosed, 503, "overloaded", ""},
		{errNotFound, 404, "not_found", ""},
		{errMethod, 405, "method_not_allowed", ""},
		{fmt.Errorf("%w: %w", errServiceUnhealthy, errors.New("ping")), 503, "not_ready", ""},
		{fmt.Errorf("%w: %w", errClientGone, errors.New("read body")), 499, "client_closed_request", ""},
		{fmt.Errorf("wait: %w", context.Canceled), 499, "client_closed_request", ""},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), 503, "timeout", ""},
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
	if _, body := classify(fmt.Errorf("%w: user=secret", inventory.ErrStoreUnavailable)); strings.Contains(body.Message, "secret") {
		t.Errorf("store_unavailable leaks its cause: %q", body.Message)
	}
}

// TestErrorTableRows checks every row of the table on its own error: no
// earlier row shadows it, and every 503 is one a client may retry.
func TestErrorTableRows(t *testing.T) {
	for i, row := range errorTable {
		status, body := classify(fmt.Errorf("wrapped: %w", row.err))
		if status != row.status || body.Code != row.code {
			t.Errorf("row %d (%v): classify = %d %q, want %d %q", i, row.err, status, body.Code, row.status, row.code)
		}
		if row.status >= 500 && row.status != http.StatusServiceUnavailable {
			t.Errorf("row %d (%v) answers %d: only unforeseen faults are 5xx other than 503", i, row.err, row.status)
		}
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
		{`{"lines":"sku"}`, true},   // a string value is not a key
		{`{"l\u0069nes":[]}`, true}, // an escaped key is its unescaped name
		{`{"lines":[],"l\u0069nes":[]}`, false},
		{`{"lines":"a\"sku\":{\"x"}`, true}, // escaped quotes stay inside the value
		{`{"lines":[{"sku":"a"}],"quantity":{"sku":"b","sku":"c"}}`, false},
		{`{"lines":[{"sku":"a",
			"quantity":1}]} `, true},
		{strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth), true},
		{strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), false},
	}
	for _, c := range cases {
		if err := checkKeys([]byte(c.body), fields); (err == nil) != c.ok {
			t.Errorf("checkKeys(%s) = %v, want ok=%v", c.body, err, c.ok)
		}
	}
}

// FuzzCheckKeys holds the one-pass walk to the decoder's token stream on
// every well-formed document: both accept the same ones.
func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{`{"lines":[{"sku":"a","quantity":1}]}`, `{"lines":[],"lines":[]}`,
		`{"l\u0069nes":[{"s\u006bu":"x"}]}`, `[{"sku":1},{"sku":2,"sku":3}]`, `"sku"`, `{"a\\":1}`,
		`{"lines":[{"sku":"\"}\""}]}`, `{}`, `[]`, `1`} {
		f.Add([]byte(s))
	}
	fields := map[string]bool{"lines": true, "sku": true, "quantity": true, "hold_seconds": true}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := checkKeys(body, fields) // must not panic on anything
		if !json.Valid(body) {
			return
		}
		if want := tokenCheckKeys(body, fields); (got == nil) != (want == nil) {
			t.Fatalf("checkKeys(%s) = %v, the token walk = %v", body, got, want)
		}
	})
}

// tokenCheckKeys is the reference: the same rule, and depth bound, on the
// decoder's tokens.
func tokenCheckKeys(body []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object, wantKey bool
		keys            map[string]bool
	}
	var stack []*frame
	done := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if n := len(stack); n > 0 && stack[n-1].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				done()
				continue
			}
			key := tok.(string)
			if !fields[key] || stack[n-1].keys[key] {
				return fmt.Errorf("bad key %q", key)
			}
			stack[n-1].keys[key], stack[n-1].wantKey = true, false
			continue
		}
		if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') && len(stack) == maxDepth {
			return errors.New("too deep")
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, wantKey: true, keys: map[string]bool{}})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			done()
		default:
			done()
		}
	}
}

package inventory

import (
	"time"

	"github.com/google/uuid"
)

// Limits on what a client may ask for; checked before any lock, key or row
// is touched, since SKUs become ZooKeeper paths and Redis keys.
const (
	MaxLines       = 100
	MaxQuantity    = 1_000_000
	MaxStock       = 1_000_000_000
	DefaultHold    = 900 * time.Second
	MaxHold        = 86400 * time.Second
	MaxIdempotency = 255
)

// SKUPattern is what a SKU name must match. ValidateSKU checks it by hand:
// it runs for every line of every order, and the regexp engine cost 3.5 %
// of an instance's CPU on the spread workload.
const SKUPattern = `^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`

// ValidateSKU checks a SKU name against SKUPattern.
func ValidateSKU(sku string) error {
	if !validSKU(sku) {
		return invalid("sku %q must match %s", Clip(sku), SKUPattern)
	}
	return nil
}

func validSKU(sku string) bool {
	if len(sku) == 0 || len(sku) > 64 || !alnum(sku[0]) {
		return false
	}
	for i := 1; i < len(sku); i++ {
		if c := sku[i]; !alnum(c) && c != '.' && c != '_' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// PlaceRequest is a new order as a client asked for it.
type PlaceRequest struct {
	Lines          []LineRequest
	Hold           time.Duration
	IdempotencyKey string
}

// LineRequest is one requested line.
type LineRequest struct {
	SKU      string
	Quantity int64
}

// Validate checks the request and fills the default hold.
func (r *PlaceRequest) Validate() error {
	if len(r.Lines) == 0 {
		return invalid("an order needs at least one line")
	}
	if len(r.Lines) > MaxLines {
		return invalid("an order has at most %d lines, got %d", MaxLines, len(r.Lines))
	}
	seen := make(map[string]bool, len(r.Lines))
	for i, l := range r.Lines {
		if !validSKU(l.SKU) {
			// Said here, not through ValidateSKU's error, whose text would
			// repeat "invalid request" inside this one's.
			return invalid("lines[%d]: sku %q must match %s", i, Clip(l.SKU), SKUPattern)
		}
		if seen[l.SKU] {
			return invalid("lines[%d]: sku %q appears twice", i, l.SKU)
		}
		seen[l.SKU] = true
		if l.Quantity < 1 || l.Quantity > MaxQuantity {
			return invalid("lines[%d]: quantity must be an integer in 1..%d", i, MaxQuantity)
		}
	}
	if r.Hold == 0 {
		r.Hold = DefaultHold
	}
	if r.Hold < time.Second || r.Hold > MaxHold {
		return invalid("hold_seconds must be in 1..%d", int(MaxHold/time.Second))
	}
	if r.IdempotencyKey != "" {
		return ValidateIdempotencyKey(r.IdempotencyKey)
	}
	return nil
}

// ValidateIdempotencyKey checks a key a client sent: 1..MaxIdempotency bytes
// of printable ASCII (space to tilde), neither first nor last a space. The
// key is stored as text and compared byte for byte with other instances'
// keys: a byte that is not UTF-8 would fail in the database, for every order
// of the batch it joined, and a control byte would end up in logs. HTTP
// drops the spaces at either end of a header value (Go's client and server
// both do), so " k " would be stored as "k", the same key as another
// order's "k", and a key of spaces only would arrive empty.
func ValidateIdempotencyKey(key string) error {
	if key == "" {
		return invalid("Idempotency-Key is empty (HTTP drops the spaces at either end of a header value), want 1..%d bytes", MaxIdempotency)
	}
	if len(key) > MaxIdempotency {
		return invalid("Idempotency-Key must be 1..%d bytes, got %d", MaxIdempotency, len(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return invalid("Idempotency-Key must be printable ASCII: byte %d is 0x%02x", i, key[i])
		}
	}
	if key[0] == ' ' || key[len(key)-1] == ' ' {
		return invalid("Idempotency-Key must not start or end with a space: HTTP drops those, so the key kept would not be the key sent")
	}
	return nil
}

// ValidateOrderID checks an order id from a path: a malformed one is simply
// an order that does not exist.
func ValidateOrderID(id string) error {
	if _, err := uuid.Parse(id); err != nil {
		return ErrUnknownOrder
	}
	return nil
}

// ValidateStock checks a stock level set by PUT. MaxStock bounds what a PUT
// sets, not the counter: cancels and expiries return units on top of it, and
// refusing those would strand held stock, so available may read higher.
func ValidateStock(available int64) error {
	if available < 0 || available > MaxStock {
		return invalid("available must be an integer in 0..%d", int64(MaxStock))
	}
	return nil
}

// ValidateExpectation checks what a conditional PUT expects to find
// (expect_available, expect_received): any count a GET can show, so not
// MaxStock, which bounds what a PUT sets: cancels return units above it,
// and received sums every PUT's additions.
func ValidateExpectation(e StockExpectation) error {
	if e.Available != nil && *e.Available < 0 {
		return invalid("expect_available must be a non-negative integer")
	}
	if e.Received != nil && *e.Received < 0 {
		return invalid("expect_received must be a non-negative integer")
	}
	return nil
}

// Clip shortens a string a client sent for an error message, which echoes
// it back: the answer must not be as long as the client made the string.
func Clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

package inventory

import (
	"regexp"
	"time"
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

var skuPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

// ValidateSKU checks a SKU name.
func ValidateSKU(sku string) error {
	if !skuPattern.MatchString(sku) {
		return invalid("sku %q must match %s", truncate(sku), skuPattern)
	}
	return nil
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
		if err := ValidateSKU(l.SKU); err != nil {
			return invalid("lines[%d]: %v", i, err)
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
	if len(r.IdempotencyKey) > MaxIdempotency {
		return invalid("Idempotency-Key is longer than %d bytes", MaxIdempotency)
	}
	for i := 0; i < len(r.IdempotencyKey); i++ {
		// Printable ASCII only: the key is stored as text, and a byte the
		// database refuses would fail the write of a whole batch.
		if c := r.IdempotencyKey[i]; c < 0x20 || c > 0x7e {
			return invalid("Idempotency-Key must be printable ASCII: byte %d is %#x", i, c)
		}
	}
	return nil
}

// ValidateStock checks a stock level set by PUT.
func ValidateStock(available int64) error {
	if available < 0 || available > MaxStock {
		return invalid("available must be an integer in 0..%d", int64(MaxStock))
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

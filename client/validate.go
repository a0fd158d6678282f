package client

import "fmt"

// The API's limits on a request (api/openapi.yaml: the request schemas and
// the Idempotency-Key parameter). The client refuses a request beyond them
// itself: that saves a round trip, and a key that no header can carry would
// otherwise fail in the transport, as if no answer came, and be retried.
const (
	maxLines       = 100
	maxQuantity    = 1_000_000
	maxStock       = 1_000_000_000
	maxHoldSeconds = 86_400
	maxKey         = 255
	maxSKU         = 64
	skuPattern     = `^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`
)

// notSent is the error of a request the service would answer 400
// invalid_request, so the client never sent it: it matches
// ErrInvalidRequest and is no *APIError, as no answer came.
func notSent(op string, err error) error {
	return &callError{op: op, err: fmt.Errorf("not sent: %w: %v", ErrInvalidRequest, err)}
}

// checkSKU checks sku against skuPattern, by hand as the service does: it
// runs for every line of every order.
func checkSKU(sku string) error {
	ok := len(sku) > 0 && len(sku) <= maxSKU && alnum(sku[0])
	for i := 1; ok && i < len(sku); i++ {
		c := sku[i]
		ok = alnum(c) || c == '.' || c == '_' || c == ':' || c == '-'
	}
	if !ok {
		return fmt.Errorf("sku %q must match %s", clip(sku), skuPattern)
	}
	return nil
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// checkKey checks an Idempotency-Key by the service's rule: 1..maxKey bytes
// of printable ASCII.
func checkKey(key string) error {
	if key == "" || len(key) > maxKey {
		return fmt.Errorf("Idempotency-Key must be 1..%d bytes, got %d", maxKey, len(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return fmt.Errorf("Idempotency-Key must be printable ASCII: byte %d is 0x%02x", i, key[i])
		}
	}
	return nil
}

// checkOrder checks what the service checks of an order's lines and hold
// before it is placed (its key is PlaceOrderJSON's to check).
func checkOrder(req OrderRequest) error {
	if len(req.Lines) == 0 || len(req.Lines) > maxLines {
		return fmt.Errorf("an order has 1..%d lines, got %d", maxLines, len(req.Lines))
	}
	seen := make(map[string]bool, len(req.Lines))
	for i, l := range req.Lines {
		if err := checkSKU(l.SKU); err != nil {
			return fmt.Errorf("lines[%d]: %w", i, err)
		}
		if seen[l.SKU] {
			return fmt.Errorf("lines[%d]: sku %q appears twice", i, l.SKU)
		}
		seen[l.SKU] = true
		if l.Quantity < 1 || l.Quantity > maxQuantity {
			return fmt.Errorf("lines[%d]: quantity must be in 1..%d, got %d", i, maxQuantity, l.Quantity)
		}
	}
	if req.HoldSeconds < 0 || req.HoldSeconds > maxHoldSeconds {
		return fmt.Errorf("hold_seconds must be in 1..%d (0: the default), got %d", maxHoldSeconds, req.HoldSeconds)
	}
	return nil
}

// checkStock checks a stock level for SetStock.
func checkStock(available int64) error {
	if available < 0 || available > maxStock {
		return fmt.Errorf("available must be in 0..%d, got %d", maxStock, available)
	}
	return nil
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

// clip shortens a name for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

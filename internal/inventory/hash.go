package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
)

// Hash is a digest of what the request asks for, not of its bytes: the same
// order sent with other whitespace or key order is the same request.
func (r *PlaceRequest) Hash() string {
	h := sha256.New()
	writeField(h, "hold", r.Hold.String())
	for _, l := range r.Lines {
		writeField(h, "sku", l.SKU)
		writeField(h, "qty", fmt.Sprint(l.Quantity))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeField(h hash.Hash, name, value string) {
	fmt.Fprintf(h, "%s=%d:%s;", name, len(value), value)
}

package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// Hash is a digest of what the request asks for, not of its bytes: the same
// order sent with other whitespace or key order is the same request. Orders
// keep it (orders.request_hash) to tell a replay from a reuse of its key, so
// its input, `name=len:value;` per field, never changes. Built by appends,
// not fmt: every order pays for it.
func (r *PlaceRequest) Hash() string {
	b := make([]byte, 0, 64+32*len(r.Lines))
	b = appendField(b, "hold", r.Hold.String())
	for _, l := range r.Lines {
		b = appendField(b, "sku", l.SKU)
		b = appendField(b, "qty", strconv.FormatInt(l.Quantity, 10))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func appendField(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, '=')
	b = strconv.AppendInt(b, int64(len(value)), 10)
	b = append(b, ':')
	b = append(b, value...)
	return append(b, ';')
}

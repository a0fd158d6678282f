// Package inventory is Stockguard's domain: SKUs, orders, the rules that
// move stock between available, reserved (held) and sold (Ledger), request
// validation, and the Store that persists it all behind fenced writes. It
// knows nothing of locks: the request path (internal/reservation) takes the
// leases and hands their fences to the Store.
package inventory

import (
	"time"

	"github.com/google/uuid"
)

// SKU is the stock of one item. Received is every unit ever put on sale, so
// Received = Available + Reserved + Sold always holds for a consistent SKU.
type SKU struct {
	SKU        string    `json:"sku"`
	Available  int64     `json:"available"`
	Reserved   int64     `json:"reserved"`
	Sold       int64     `json:"sold"`
	Received   int64     `json:"received"`
	FenceToken uint64    `json:"fence_token"`
	UpdatedAt  time.Time `json:"-"`
}

// Status is an order's state.
type Status string

// Order states.
const (
	StatusReserved  Status = "reserved"
	StatusConfirmed Status = "confirmed"
	StatusCancelled Status = "cancelled"
	StatusExpired   Status = "expired"
)

// Line is one SKU of an order. FenceToken is the token of the lease the line
// was reserved under: the audit trail of which holder wrote it.
type Line struct {
	SKU        string `json:"sku"`
	Quantity   int64  `json:"quantity"`
	FenceToken uint64 `json:"fence_token"`
}

// Order is a reservation of stock over one or more SKUs.
type Order struct {
	ID             uuid.UUID `json:"order_id"`
	Status         Status    `json:"status"`
	Lines          []Line    `json:"lines"`
	ExpiresAt      time.Time `json:"expires_at"`
	CreatedAt      time.Time `json:"-"`
	IdempotencyKey string    `json:"-"`
	RequestHash    string    `json:"-"`
}

// SKUs returns the order's SKU names in line order.
func (o *Order) SKUs() []string {
	s := make([]string, len(o.Lines))
	for i, l := range o.Lines {
		s[i] = l.SKU
	}
	return s
}

// Audit recomputes a SKU's state from the order lines, independently of its
// counters: held and sold come from the lines of reserved and confirmed
// orders. Oversold = max(0, held + sold − received); LostUnits = received −
// held − sold − available, non-zero when an update was lost.
type Audit struct {
	SKU        string `json:"sku"`
	Received   int64  `json:"received"`
	Held       int64  `json:"held"`
	Sold       int64  `json:"sold"`
	Available  int64  `json:"available"`
	Oversold   int64  `json:"oversold"`
	LostUnits  int64  `json:"lost_units"`
	Consistent bool   `json:"consistent"`
}

// NewAudit derives the audit figures from the raw sums.
func NewAudit(sku string, received, held, sold, available int64) Audit {
	a := Audit{SKU: sku, Received: received, Held: held, Sold: sold, Available: available}
	a.Oversold = max(0, held+sold-received)
	a.LostUnits = received - held - sold - available
	a.Consistent = a.Oversold == 0 && a.LostUnits == 0
	return a
}

package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
)

// SKU is a SKU's counters as stored.
type SKU struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
	Sold      int64  `json:"sold"`
	// Received is every unit ever put on sale: Available + Reserved + Sold.
	Received int64 `json:"received"`
	// FenceToken is the token of the last lease that wrote the row; 0 for
	// backends without tokens.
	FenceToken uint64 `json:"fence_token"`
}

func (s *SKU) valid() error {
	if s.SKU == "" {
		return errors.New("no sku")
	}
	return nil
}

// Audit is a SKU recomputed from its order lines.
type Audit struct {
	SKU       string `json:"sku"`
	Received  int64  `json:"received"`
	Held      int64  `json:"held"`
	Sold      int64  `json:"sold"`
	Available int64  `json:"available"`
	Oversold  int64  `json:"oversold"`
	// LostUnits is Received - Held - Sold - Available; non-zero means a
	// lost update.
	LostUnits  int64 `json:"lost_units"`
	Consistent bool  `json:"consistent"`
}

func (a *Audit) valid() error {
	if a.SKU == "" {
		return errors.New("no sku")
	}
	return nil
}

// Order statuses.
const (
	StatusReserved  = "reserved"
	StatusConfirmed = "confirmed"
	StatusCancelled = "cancelled"
	StatusExpired   = "expired"
)

// Line is one line of an order.
type Line struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
	// FenceToken is the token of the lease that reserved the line (answers
	// only).
	FenceToken uint64 `json:"fence_token,omitempty"`
}

// OrderRequest is an order to place.
type OrderRequest struct {
	Lines []Line
	// HoldSeconds is how long the reservation holds; 0 means the service's
	// default (900).
	HoldSeconds int
	// IdempotencyKey identifies the logical order: the same key with the
	// same lines replays the first answer. Empty means PlaceOrder makes one
	// (a random UUID) and sends it on every attempt.
	IdempotencyKey string
}

// Order is an order as the service answered it.
type Order struct {
	ID        string    `json:"order_id"`
	Status    string    `json:"status"`
	Lines     []Line    `json:"lines"`
	ExpiresAt time.Time `json:"expires_at"`
	// IdempotencyKey is the key the order was placed with (PlaceOrder only);
	// send it again to replay the order.
	IdempotencyKey string `json:"-"`
	// Replayed is true when the order existed before this PlaceOrder call:
	// the service answered with a replay (Idempotent-Replayed: true), and
	// no attempt of this call can have placed it, as each one before the
	// answer was turned away with nothing written. An earlier call with
	// the same key placed it, and what follows a new order (a charge, a
	// mail) is that call's to do; if that call was the caller's own and
	// ended in an unknown outcome, it is still to do. Never true when
	// PlaceOrder made the key: nobody else had it.
	Replayed bool `json:"-"`
	// ReplayedAfterLostAnswer is true when the service answered with a
	// replay after an attempt of this call got no answer, or one that may
	// follow a write (503 store_unavailable or timeout): that attempt may
	// have placed the order, or an earlier call with the same key may
	// have, and nothing the client sees tells which. Replayed is false
	// then. Treat the order as possibly new: run what follows a new order,
	// made idempotent by the order ID. Never true when PlaceOrder made the
	// key: the replay is of this call's own attempt, so the order is new.
	ReplayedAfterLostAnswer bool `json:"-"`
}

// valid asks for the id every other call on the order needs.
func (o *Order) valid() error {
	if inventory.ValidateOrderID(o.ID) != nil {
		return fmt.Errorf("order_id %q is not a uuid", inventory.Clip(o.ID))
	}
	return nil
}

package inventory

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Fence is the lease that covers writes to one SKU: its token and its id.
// The store accepts a write only while the row carries this exact fence.
type Fence struct {
	SKU    string
	Token  uint64
	Holder uuid.UUID
}

// Write is what was decided under the leases: the SKUs' new counters and the
// order changes that go with them, applied in one transaction.
type Write struct {
	SKUs []SKU
	// Orders are inserted with their lines, all of them or none.
	Orders []*Order
	// Transitions move existing orders, each at most once, From → To; they
	// are applied first, and if any order is no longer in its From the
	// whole write fails with the *OrderErrors of every such order joined
	// (errors.Join), each matching ErrInvalidTransition.
	Transitions []Transition
}

// Transition is a status change of an existing order.
type Transition struct {
	ID       uuid.UUID
	From, To Status
}

// Store persists SKUs and orders. Every SKU write is fenced: see Claim and Write.
type Store interface {
	// Claim is the first statement under the leases: it stamps each fence on
	// its SKU row, committed at once so a later, older holder is shut out
	// from then on, and returns the counters it saw. A row whose fence is
	// newer fails with ErrStaleFence, a missing row with ErrUnknownSKU (or is
	// created empty when create is set), both as *SKUError; several such
	// rows fail as their *SKUErrors joined (errors.Join), every one named,
	// and the rows that did match stay claimed.
	Claim(ctx context.Context, fences []Fence, create bool) (map[string]SKU, error)
	// Write applies w in one transaction that requires every fence to still
	// stand; otherwise nothing is written and the error is ErrStaleFence,
	// naming the rows as Claim does where it can tell them. An
	// order whose idempotency key another order holds fails the whole write
	// with a *KeyTakenError naming every such key. An error that matches
	// ErrOutcomeUnknown leaves open whether w was applied; any other error
	// means nothing of w was.
	Write(ctx context.Context, fences []Fence, w Write) error

	SKU(ctx context.Context, sku string) (SKU, error)
	Audit(ctx context.Context, sku string) (Audit, error)
	Order(ctx context.Context, id uuid.UUID) (*Order, error)

	// OrdersByKey returns, by key, the orders that hold any of keys, with
	// their lines; a key no order holds is absent.
	OrdersByKey(ctx context.Context, keys []string) (map[string]*Order, error)
	// KnownSKUs reports which of names exist, in one statement: a name maps
	// to true when its row exists and is absent otherwise. SKUs are never
	// deleted, so a name once seen to exist exists for good.
	KnownSKUs(ctx context.Context, names []string) (map[string]bool, error)

	// ExpiredOrders lists, with their lines, up to limit reserved orders
	// whose hold ended by now and that come after after in (expires_at, id)
	// order, in that order, leaving out those in skip.
	ExpiredOrders(ctx context.Context, now time.Time, after DueCursor, limit int, skip []uuid.UUID) ([]*Order, error)
	Ping(ctx context.Context) error
}

// DueCursor is where a listing of due orders goes on from: after the order
// with this hold end and id. The zero value starts at the first.
type DueCursor struct {
	ExpiresAt time.Time
	ID        uuid.UUID
}

// Due is o's place in the listing of due orders.
func Due(o *Order) DueCursor { return DueCursor{ExpiresAt: o.ExpiresAt, ID: o.ID} }

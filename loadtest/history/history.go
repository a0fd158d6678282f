package history

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Kind is what an operation asked for.
type Kind int

// The operations on orders.
const (
	Place Kind = iota + 1
	Confirm
	Cancel
	Expire
)

func (k Kind) String() string {
	switch k {
	case Place:
		return "place"
	case Confirm:
		return "confirm"
	case Cancel:
		return "cancel"
	case Expire:
		return "expire"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Result classifies an answer.
type Result int

// The three outcomes of an operation.
const (
	// Unknown: no definite answer (timeout, connection lost, 503 after the
	// request was sent); the operation may or may not have taken effect.
	Unknown Result = iota
	// OK: acknowledged; the operation took effect.
	OK
	// Failed: a definite refusal; the operation had no effect.
	Failed
)

func (r Result) String() string {
	switch r {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Error codes of definite failures that the model checks against the state
// (any other code is a failure with no effect and no claim about the state).
const (
	CodeInsufficientStock = "insufficient_stock"
	CodeInvalidTransition = "invalid_transition"
)

// Line is one SKU and quantity of an order.
type Line struct {
	SKU      string
	Quantity int64
	// Token is the fence token the line was written under, as the service
	// answered or the final read found it; 0 in a request, and from a
	// backend that issues no tokens (none, local).
	Token uint64
}

// Outcome is how an operation ended.
type Outcome struct {
	Result Result
	// OrderID is the order an OK place created (for the other kinds, Op
	// names the order).
	OrderID string
	// Lines are the lines an OK place answered with, with their tokens.
	Lines []Line
	// Code is a Failed operation's error code (CodeInsufficientStock, ...).
	Code string
	// SKU is the SKU an insufficient_stock failure names.
	SKU string
}

// Op is one logical operation of one client.
type Op struct {
	Client int
	Kind   Kind
	// Key is a place's Idempotency-Key: the final read joins orders to the
	// operations that placed them by it, so keys must be unique per place.
	Key string
	// OrderID is the order a confirm, cancel or expire acts on.
	OrderID string
	// Lines are the lines a place asked for.
	Lines    []Line
	Invoke   time.Time
	Complete time.Time // zero while in flight (then the outcome is Unknown)
	Outcome  Outcome
}

// History is a concurrent-safe record of operations.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Invoke records op's invocation now (op.Invoke is overwritten) and returns
// the handle that Complete takes.
func (h *History) Invoke(op Op) int {
	op.Invoke = time.Now()
	op.Complete = time.Time{}
	op.Outcome = Outcome{}
	op.Lines = slices.Clone(op.Lines)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
	return len(h.ops) - 1
}

// Complete records the outcome of the operation id now. An operation never
// completed stays Unknown.
func (h *History) Complete(id int, out Outcome) {
	now := time.Now()
	out.Lines = slices.Clone(out.Lines)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops[id].Complete = now
	h.ops[id].Outcome = out
}

// Ops returns a copy of the operations in invocation order.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// Status of an order in the final read.
const (
	StatusReserved  = "reserved"
	StatusConfirmed = "confirmed"
	StatusCancelled = "cancelled"
	StatusExpired   = "expired"
)

// FinalOrder is one order as the final read found it (from the orders and
// order_lines tables: the API does not expose idempotency keys).
type FinalOrder struct {
	ID        string
	Key       string
	Status    string
	Lines     []Line
	ExpiresAt time.Time
}

// FinalSKU is one SKU's counters as the final read found them.
type FinalSKU struct {
	SKU                   string
	Available, Held, Sold int64
}

// Final is the state read after the run, once no request is in flight and
// no instance can still write.
type Final struct {
	At     time.Time
	Orders []FinalOrder
	SKUs   []FinalSKU
}

package inventory

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// Sentinel errors; httpapi maps each to one status and code.
var (
	ErrInvalid             = errors.New("invalid request")
	ErrUnknownSKU          = errors.New("unknown sku")
	ErrUnknownOrder        = errors.New("unknown order")
	ErrInsufficientStock   = errors.New("insufficient stock")
	ErrStaleFence          = errors.New("stale fence token")
	ErrInvalidTransition   = errors.New("invalid order transition")
	ErrIdempotencyInFlight = errors.New("idempotency key in flight")
	ErrIdempotencyReused   = errors.New("idempotency key reused with a different request")
	// ErrStockChanged is a stock level to be set only if the SKU's
	// counters are the ones expected (StockExpectation), and they were
	// not: nothing was written.
	ErrStockChanged = errors.New("stock changed")
	// ErrOverloaded is work refused because a bound on what waits (requests
	// in flight, orders queued) is reached; retry later, elsewhere if need be.
	ErrOverloaded = errors.New("overloaded")
	// ErrConflict is a write that collided with a concurrent writer the lock
	// should have kept out: a deadlock between writers that no lock kept
	// apart (the none and local backends, across instances). Nothing was
	// written; retryable.
	ErrConflict = errors.New("concurrent write conflict")
	// ErrStoreUnavailable is a database that could not answer: connection
	// lost or refused, too many connections, a statement timeout, a server
	// shutting down or read-only. Unless the error also matches
	// ErrOutcomeUnknown, the statement failed and nothing was written; a
	// retry may succeed.
	ErrStoreUnavailable = errors.New("store unavailable")
	// ErrOutcomeUnknown is a write that was sent but whose answer never
	// came: the connection broke, or the request's context ended and the
	// server did not confirm the statement's cancel in time, or the server
	// said it cannot tell. The write may have been applied, whole, or not at
	// all: only reading it back (the order by its id) tells, and only once
	// the store has settled it (the postgres store bounds that with its
	// statement timeout). It comes with ErrStoreUnavailable, or with the
	// context's error when the request's context ended first.
	ErrOutcomeUnknown = errors.New("outcome unknown: the write may have been applied")
)

// StockError is an insufficient-stock failure on one SKU.
type StockError struct {
	SKU       string
	Requested int64
	Available int64
}

func (e *StockError) Error() string {
	return fmt.Sprintf("insufficient stock for %q: requested %d, available %d", e.SKU, e.Requested, e.Available)
}

// Is makes a StockError match ErrInsufficientStock.
func (e *StockError) Is(target error) bool { return target == ErrInsufficientStock }

// SKUError names the SKU an error is about (unknown or stale).
type SKUError struct {
	SKU string
	Err error
}

func (e *SKUError) Error() string { return fmt.Sprintf("sku %q: %v", e.SKU, e.Err) }

// Unwrap returns the underlying sentinel.
func (e *SKUError) Unwrap() error { return e.Err }

// KeyTakenError is a write refused because orders in it carry idempotency
// keys that other orders hold by now: duplicates that reached a write after
// their first request did, from another instance. Nothing was written.
type KeyTakenError struct {
	Keys []string
}

func (e *KeyTakenError) Error() string {
	return fmt.Sprintf("idempotency keys %q are held by other orders", e.Keys)
}

// Is makes a KeyTakenError match ErrIdempotencyInFlight: escaping its
// request, it means the key's first request got there first.
func (e *KeyTakenError) Is(target error) bool { return target == ErrIdempotencyInFlight }

// OrderError is a write refused because of one order in it (a value of that
// order the database would not take). Nothing was written: the request
// path answers that order with Err and writes the rest of its batch again.
type OrderError struct {
	ID  uuid.UUID
	Err error
}

func (e *OrderError) Error() string { return fmt.Sprintf("order %s: %v", e.ID, e.Err) }

// Unwrap returns why the order was refused.
func (e *OrderError) Unwrap() error { return e.Err }

// TransitionError is a refused status change.
type TransitionError struct {
	From, To Status
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("cannot move an order from %s to %s", e.From, e.To)
}

// Is makes a TransitionError match ErrInvalidTransition.
func (e *TransitionError) Is(target error) bool { return target == ErrInvalidTransition }

// invalid wraps ErrInvalid with a message a client can act on.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

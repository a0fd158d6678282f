package run

import (
	"fmt"
	"sync"

	"github.com/stockguard/stockguard/loadtest/client"
)

// Receipts is the client's own record of what the service promised: every
// 201 it received, by order id. (Its figures are called "ledger" in the
// output and the JSON, which predate the name.) It is the first of the three sources the
// verification compares, and the only one the service cannot rewrite. It
// also holds the orders whose outcome the client never learnt
// (MarkUnresolved), whose units the service may or may not hold.
//
// Units are counted once per promise, a distinct pair of idempotency key
// and order id: a replayed answer (same key, same order id) does not count
// twice, while a service that reserves twice for one key (two order ids)
// does, and so does one that answers two keys, two customers, with one
// order (two promises, one order stored), which is also a problem.
type Receipts struct {
	mu       sync.Mutex
	booked   map[promise]bool
	byOrder  map[string]string // order id → the first key answered with it
	byKey    map[string]string // idempotency key → first order id
	units    map[string]int64  // SKU → units reserved
	maxToken map[string]uint64 // SKU → highest fence token in a 201
	problems []Disagreement

	unresolved      map[string]bool  // idempotency keys of orders of unknown outcome
	unresolvedUnits map[string]int64 // SKU → their units
}

// NewReceipts returns an empty record.
func NewReceipts() *Receipts {
	return &Receipts{
		booked:   map[promise]bool{},
		byOrder:  map[string]string{},
		byKey:    map[string]string{},
		units:    map[string]int64{},
		maxToken: map[string]uint64{},

		unresolved:      map[string]bool{},
		unresolvedUnits: map[string]int64{},
	}
}

// promise is one 201: the key it answered and the order id it gave.
type promise struct{ key, orderID string }

// Record books a 201 for the request sent with key; a replay (the same key
// and order id again) adds nothing.
func (l *Receipts) Record(key string, req client.OrderRequest, resp *client.OrderResponse) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if first, ok := l.byKey[key]; ok && first != resp.OrderID {
		l.problems = append(l.problems, Disagreement{
			SKU: req.Lines[0].SKU, Kind: "idempotency_violated",
			Detail: fmt.Sprintf("key %s answered with two order ids %s and %s", key, first, resp.OrderID),
		})
	} else if !ok {
		l.byKey[key] = resp.OrderID
	}
	if first, ok := l.byOrder[resp.OrderID]; ok && first != key {
		l.problems = append(l.problems, Disagreement{
			SKU: req.Lines[0].SKU, Kind: "order_id_shared",
			Detail: fmt.Sprintf("order %s answered to two keys %s and %s", resp.OrderID, first, key),
		})
	} else if !ok {
		l.byOrder[resp.OrderID] = key
	}
	l.resolveLocked(key, req)
	p := promise{key, resp.OrderID}
	if l.booked[p] {
		return
	}
	l.booked[p] = true
	if !sameLines(req, resp) {
		l.problems = append(l.problems, Disagreement{
			SKU: req.Lines[0].SKU, Kind: "response_lines_differ",
			Detail: fmt.Sprintf("order %s: the 201 lines differ from the request", resp.OrderID),
		})
	}
	// All lines or none: the request's lines are what was promised.
	for _, ln := range req.Lines {
		l.units[ln.SKU] += int64(ln.Quantity)
	}
	for _, ln := range resp.Lines {
		l.maxToken[ln.SKU] = max(l.maxToken[ln.SKU], ln.FenceToken)
	}
}

// MarkUnresolved books the order sent with key, whose outcome stayed
// unknown, as possibly reserved: Verify accepts each SKU holding anything
// from its receipts' units to those plus the units of such orders. A key
// marked twice, or already answered with a 201, adds nothing.
func (l *Receipts) MarkUnresolved(key string, req client.OrderRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, answered := l.byKey[key]; answered || l.unresolved[key] {
		return
	}
	l.unresolved[key] = true
	for _, ln := range req.Lines {
		l.unresolvedUnits[ln.SKU] += int64(ln.Quantity)
	}
}

// Refused notes that the order sent with key, once marked unresolved,
// was refused after all (a definite answer other than a 201 to a later
// resend): none of its units are held.
func (l *Receipts) Refused(key string, req client.OrderRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resolveLocked(key, req)
}

// resolveLocked unmarks key's order, if it was marked unresolved.
func (l *Receipts) resolveLocked(key string, req client.OrderRequest) {
	if !l.unresolved[key] {
		return
	}
	delete(l.unresolved, key)
	for _, ln := range req.Lines {
		l.unresolvedUnits[ln.SKU] -= int64(ln.Quantity)
	}
}

// Unresolved returns the number of orders marked unresolved.
func (l *Receipts) Unresolved() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.unresolved)
}

// UnresolvedUnits returns the units for sku of the orders marked
// unresolved.
func (l *Receipts) UnresolvedUnits(sku string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unresolvedUnits[sku]
}

// Units returns the units the receipts hold as reserved for sku.
func (l *Receipts) Units(sku string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.units[sku]
}

// MaxToken returns the highest fence token any 201 reported for sku.
func (l *Receipts) MaxToken(sku string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxToken[sku]
}

// Orders returns the number of distinct order ids booked.
func (l *Receipts) Orders() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byOrder)
}

// Problems returns what the receipts themselves show wrong with the answers.
func (l *Receipts) Problems() []Disagreement {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Disagreement(nil), l.problems...)
}

func sameLines(req client.OrderRequest, resp *client.OrderResponse) bool {
	if len(req.Lines) != len(resp.Lines) {
		return false
	}
	want := make(map[string]int, len(req.Lines))
	for _, l := range req.Lines {
		want[l.SKU] = l.Quantity
	}
	for _, l := range resp.Lines {
		// Deleting what matched makes a SKU answered twice (A×1, A×1 for
		// A×1, B×1) a mismatch: lines are one per SKU.
		if q, ok := want[l.SKU]; !ok || q != l.Quantity {
			return false
		}
		delete(want, l.SKU)
	}
	return true
}

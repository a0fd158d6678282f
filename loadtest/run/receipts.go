package run

import (
	"fmt"
	"sync"

	"github.com/stockguard/stockguard/loadtest/client"
)

// Receipts is the client's own record of what the service promised: every
// 201 it received, by order id. (Its figures are called "ledger" in the
// output and the JSON, which predate the name.) It is the first of the three sources the
// verification compares, and the only one the service cannot rewrite.
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
}

// NewReceipts returns an empty record.
func NewReceipts() *Receipts {
	return &Receipts{
		booked:   map[promise]bool{},
		byOrder:  map[string]string{},
		byKey:    map[string]string{},
		units:    map[string]int64{},
		maxToken: map[string]uint64{},
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
		if q, ok := want[l.SKU]; !ok || q != l.Quantity {
			return false
		}
	}
	return true
}

package inventory

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Ledger is the stock of the SKUs under a set of leases: what the claim
// returned, moved by every decision since. While the leases hold, it is
// exactly what the rows say, since only a holder of those leases writes them
// and every write it makes is fenced. Its methods are the stock rules; each
// moves the ledger all the way or not at all.
type Ledger struct {
	skus   map[string]SKU
	fences map[string]Fence
	// refused holds the claim's refusal of each SKU it set aside: one that
	// does not exist, or whose row a newer lease has claimed.
	refused map[string]error
	// changed is the set of SKUs moved since the last Written.
	changed map[string]bool
}

// NewLedger starts a ledger from what a claim returned: the counters of the
// SKUs it claimed, the fence of every lease held, and the claim's refusal
// of each SKU it could not claim, unknown or stale (an operation naming one
// fails with it).
func NewLedger(skus map[string]SKU, fences map[string]Fence, refused map[string]error) *Ledger {
	return &Ledger{skus: skus, fences: fences, refused: refused, changed: make(map[string]bool)}
}

// Clone is a copy to decide a batch on: if its write fails, the ledger it
// came from is unchanged (and, since whether the write landed is not known,
// no longer to be trusted).
func (l *Ledger) Clone() *Ledger {
	return &Ledger{skus: maps.Clone(l.skus), fences: l.fences, refused: l.refused, changed: make(map[string]bool)}
}

// Reserve moves o's lines from available to reserved, all of them or none,
// and stamps each line with the token of the lease it is written under.
func (l *Ledger) Reserve(o *Order) error {
	for _, ln := range o.Lines {
		k, err := l.sku(ln.SKU)
		if err != nil {
			return err
		}
		if k.Available < ln.Quantity {
			return &StockError{SKU: ln.SKU, Requested: ln.Quantity, Available: k.Available}
		}
	}
	for i := range o.Lines {
		ln := &o.Lines[i]
		k := l.skus[ln.SKU]
		k.Available -= ln.Quantity
		k.Reserved += ln.Quantity
		l.move(ln.SKU, k)
		ln.FenceToken = l.fences[ln.SKU].Token
	}
	return nil
}

// SetAvailable sets a SKU's available units. Received moves by the same
// amount, so received = available + held + sold still holds. The SKU counts
// as changed even when the level is the same: writing it proves the lease
// still stands.
func (l *Ledger) SetAvailable(name string, available int64) (SKU, error) {
	k, err := l.sku(name)
	if err != nil {
		return SKU{}, err
	}
	k.Received += available - k.Available
	k.Available = available
	k.FenceToken = l.fences[name].Token
	l.move(name, k)
	return k, nil
}

// StockExpectation is what a conditional stock level expects of the SKU's
// counters, as the caller read them; a nil field is not checked. Available
// guards against the orders placed since the read, which a level computed
// from it would undo. It does not guard against a repeat of the call's own
// earlier attempt that landed, nor another PUT since the read: orders,
// cancels and expiries move available both ways, and can bring it back to
// the number read. Received moves only when a PUT changes available, so it
// guards against those.
type StockExpectation struct {
	Available *int64
	Received  *int64
}

// Check returns nil if k meets e, or an error matching ErrStockChanged
// that names every counter that differs. A SKU that does not exist is
// checked as SKU{}: 0 of each.
func (e StockExpectation) Check(k SKU) error {
	var differ []string
	if e.Available != nil && *e.Available != k.Available {
		differ = append(differ, fmt.Sprintf("available is %d, not the expected %d", k.Available, *e.Available))
	}
	if e.Received != nil && *e.Received != k.Received {
		differ = append(differ, fmt.Sprintf("received is %d, not the expected %d", k.Received, *e.Received))
	}
	if len(differ) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrStockChanged, strings.Join(differ, "; "))
}

// SetAvailableIf is SetAvailable on the condition that the SKU meets
// expect now, a SKU that does not exist counting as 0 of each; otherwise
// it moves nothing and fails with ErrStockChanged, naming the counters
// that differ. The ledger is what the claim read under the lease, so
// nothing can change them between this check and the write.
func (l *Ledger) SetAvailableIf(name string, available int64, expect StockExpectation) (SKU, error) {
	k, err := l.sku(name)
	if errors.Is(err, ErrUnknownSKU) {
		k, err = SKU{SKU: name}, nil
	}
	if err != nil {
		return SKU{}, err
	}
	if err := expect.Check(k); err != nil {
		return SKU{}, &SKUError{SKU: name, Err: err}
	}
	return l.SetAvailable(name, available)
}

// Settle ends the hold of a reserved order: confirmed, its units are sold;
// cancelled or expired, they return to available. All lines or none.
func (l *Ledger) Settle(o *Order, to Status) error {
	for _, ln := range o.Lines {
		if _, err := l.sku(ln.SKU); err != nil {
			return err
		}
	}
	for _, ln := range o.Lines {
		k := l.skus[ln.SKU]
		k.Reserved -= ln.Quantity
		if to == StatusConfirmed {
			k.Sold += ln.Quantity
		} else {
			k.Available += ln.Quantity
		}
		l.move(ln.SKU, k)
	}
	return nil
}

// Changes returns the counters moved since the last Written, in SKU order,
// and the fences they are written under.
func (l *Ledger) Changes() ([]SKU, []Fence) {
	names := slices.Sorted(maps.Keys(l.changed))
	skus := make([]SKU, len(names))
	fences := make([]Fence, len(names))
	for i, n := range names {
		skus[i], fences[i] = l.skus[n], l.fences[n]
	}
	return skus, fences
}

// Written marks the changes as written: the rows now say what the ledger does.
func (l *Ledger) Written() { clear(l.changed) }

// sku returns the counters of a SKU under the leases, or why there are none.
func (l *Ledger) sku(name string) (SKU, error) {
	if err, ok := l.refused[name]; ok {
		return SKU{}, err
	}
	k, ok := l.skus[name]
	if !ok {
		// An operation only runs under leases that cover its SKUs.
		return SKU{}, fmt.Errorf("inventory: sku %q is not under the leases", name)
	}
	return k, nil
}

func (l *Ledger) move(name string, k SKU) {
	l.skus[name] = k
	l.changed[name] = true
}

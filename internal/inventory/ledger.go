package inventory

import (
	"fmt"
	"maps"
	"slices"
)

// ledger is the stock of the SKUs under a set of leases: what the claim
// returned, moved by every decision since. While the leases hold, it is
// exactly what the rows say, since only a holder of those leases writes them
// and every write it makes is fenced.
type ledger struct {
	skus   map[string]SKU
	fences map[string]Fence
	// unknown holds the claim's error for each SKU that does not exist.
	unknown map[string]error
	// changed is the set of SKUs moved since the last write.
	changed map[string]bool
}

func newLedger(skus map[string]SKU, fences map[string]Fence, unknown map[string]error) *ledger {
	return &ledger{skus: skus, fences: fences, unknown: unknown, changed: make(map[string]bool)}
}

// clone is a copy to decide a batch on: if its write fails, the ledger it
// came from is unchanged (and no longer trusted; see hold.broken).
func (l *ledger) clone() *ledger {
	return &ledger{skus: maps.Clone(l.skus), fences: l.fences, unknown: l.unknown, changed: make(map[string]bool)}
}

// reserve moves o's lines from available to reserved, all of them or none,
// and stamps each line with the token of the lease it is written under.
func (l *ledger) reserve(o *Order) error {
	for _, ln := range o.Lines {
		if err, ok := l.unknown[ln.SKU]; ok {
			return err
		}
		k, ok := l.skus[ln.SKU]
		if !ok {
			// A batch only holds orders whose SKUs its leases cover.
			return fmt.Errorf("inventory: sku %q is not under the batch's leases", ln.SKU)
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
		l.skus[ln.SKU] = k
		ln.FenceToken = l.fences[ln.SKU].Token
		l.changed[ln.SKU] = true
	}
	return nil
}

// write returns the counters moved since the last write, in SKU order, and
// the fences they are written under.
func (l *ledger) write() ([]SKU, []Fence) {
	names := slices.Sorted(maps.Keys(l.changed))
	skus := make([]SKU, len(names))
	fences := make([]Fence, len(names))
	for i, n := range names {
		skus[i], fences[i] = l.skus[n], l.fences[n]
	}
	return skus, fences
}

package run

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/stockguard/stockguard/loadtest/client"
)

// maxListedDisagreements bounds the disagreements kept in a Result; the
// count is always exact.
const maxListedDisagreements = 200

// maxListedSKUs bounds the per-SKU checks kept in a Result: beyond it only
// SKUs with disagreements are listed (up to the bound).
const maxListedSKUs = 1000

// Disagreement is one place where the sources, or the invariants, disagree.
type Disagreement struct {
	SKU    string `json:"sku"`
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// SKUCheck compares the three sources for one SKU.
type SKUCheck struct {
	SKU         string `json:"sku"`
	Stock       int64  `json:"stock"`
	LedgerUnits int64  `json:"ledger_units"`
	// UnresolvedUnits are the units on this SKU of orders whose outcome
	// stayed unknown: the service may hold any part of them, all or none
	// of each order.
	UnresolvedUnits int64           `json:"unresolved_units,omitempty"`
	Audit           client.Audit    `json:"audit"`
	Counters        client.SKUState `json:"counters"`

	// AuditOversold is max(0, held+sold−received) computed from the audit.
	AuditOversold int64 `json:"audit_oversold"`
	// LedgerOversold is max(0, ledger units − stock): the client was
	// promised more than existed.
	LedgerOversold int64 `json:"ledger_oversold"`
	// AuditLost is |received − held − sold − available| from the audit.
	AuditLost int64 `json:"audit_lost"`
	// CountersLost is how far counters.reserved + sold lie outside the
	// range the ledger allows, its units up to its units plus
	// UnresolvedUnits: reservations the counters forgot (lost updates) or
	// invented (phantoms).
	CountersLost int64 `json:"counters_lost"`

	// Oversold and Lost take the larger figure of the sources, so damage
	// seen by any one of them is never hidden by another.
	Oversold int64 `json:"oversold"`
	Lost     int64 `json:"lost"`

	Disagreements []Disagreement `json:"disagreements,omitempty"`
}

// checkSKU compares the ledger's units (and highest fence token seen in a
// 201) with the audit and the counters of one SKU created with stock units.
// unresolved are the units on the SKU of orders whose outcome stayed
// unknown: each may or may not have been reserved, so the service may hold
// anything from ledgerUnits to ledgerUnits + unresolved. A figure inside
// that range proves nothing either way (the run is inconclusive, not
// damaged); only one outside it is a finding.
func checkSKU(sku string, stock, ledgerUnits, unresolved int64, maxToken uint64, a client.Audit, c client.SKUState) SKUCheck {
	ch := SKUCheck{SKU: sku, Stock: stock, LedgerUnits: ledgerUnits, UnresolvedUnits: unresolved, Audit: a, Counters: c}
	add := func(kind, format string, args ...any) {
		ch.Disagreements = append(ch.Disagreements, Disagreement{SKU: sku, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	outside := func(held int64) int64 {
		return max(0, ledgerUnits-held, held-ledgerUnits-unresolved)
	}
	promised := fmt.Sprint(ledgerUnits)
	if unresolved > 0 {
		promised += fmt.Sprintf(" (up to %d with the orders whose outcome stayed unknown)", ledgerUnits+unresolved)
	}

	ch.AuditOversold = max(0, a.Held+a.Sold-a.Received)
	ch.LedgerOversold = max(0, ledgerUnits-stock)
	ch.AuditLost = abs(a.Received - a.Held - a.Sold - a.Available)
	ch.CountersLost = outside(c.Reserved + c.Sold)
	ch.Oversold = max(ch.AuditOversold, ch.LedgerOversold)
	ch.Lost = max(ch.AuditLost, ch.CountersLost)

	// The audit's own figures must match its fields.
	if a.Oversold != ch.AuditOversold {
		add("audit_oversold_field", "audit says oversold=%d, its fields give %d", a.Oversold, ch.AuditOversold)
	}
	if abs(a.LostUnits) != ch.AuditLost {
		add("audit_lost_field", "audit says lost_units=%d, its fields give %d", a.LostUnits, a.Received-a.Held-a.Sold-a.Available)
	}
	if a.Consistent != (ch.AuditOversold == 0 && ch.AuditLost == 0) {
		add("audit_consistent_field", "audit says consistent=%v with oversold=%d lost=%d", a.Consistent, ch.AuditOversold, ch.AuditLost)
	}

	// Ledger against the service.
	if outside(a.Held+a.Sold) != 0 {
		add("audit_vs_ledger", "order lines hold %d units (held %d + sold %d), the client was promised %s", a.Held+a.Sold, a.Held, a.Sold, promised)
	}
	if ch.CountersLost != 0 {
		add("counters_vs_ledger", "counters reserve %d units (reserved %d + sold %d), the client was promised %s", c.Reserved+c.Sold, c.Reserved, c.Sold, promised)
	}
	if ch.LedgerOversold > 0 {
		add("ledger_oversold", "the client was promised %d units of %d in stock", ledgerUnits, stock)
	}

	// Audit against counters.
	if a.Held != c.Reserved {
		add("audit_vs_counters_held", "audit held %d, counters reserved %d", a.Held, c.Reserved)
	}
	if a.Sold != c.Sold {
		add("audit_vs_counters_sold", "audit sold %d, counters sold %d", a.Sold, c.Sold)
	}
	if a.Received != c.Received {
		add("audit_vs_counters_received", "audit received %d, counters received %d", a.Received, c.Received)
	}
	if a.Available != c.Available {
		add("audit_vs_counters_available", "audit available %d, counters available %d", a.Available, c.Available)
	}

	// Invariants of the counters themselves.
	if c.Received != stock {
		add("received_vs_stock", "counters received %d, the run created %d", c.Received, stock)
	}
	if c.Received != c.Available+c.Reserved+c.Sold {
		add("counters_invariant", "received %d != available %d + reserved %d + sold %d", c.Received, c.Available, c.Reserved, c.Sold)
	}
	if c.Available < 0 || c.Reserved < 0 || c.Sold < 0 || c.Received < 0 {
		add("negative_counter", "available %d reserved %d sold %d received %d", c.Available, c.Reserved, c.Sold, c.Received)
	}
	if maxToken > 0 && c.FenceToken < maxToken {
		add("fence_token_regressed", "the row's fence token %d is below token %d of an accepted write", c.FenceToken, maxToken)
	}
	return ch
}

// SourceTotals sums what each source says over all SKUs.
type SourceTotals struct {
	Ledger struct {
		Orders   int   `json:"orders"`
		Units    int64 `json:"units"`
		Oversold int64 `json:"oversold"`
		// UnresolvedUnits are the units of orders whose outcome stayed
		// unknown, which the service may hold on top of Units.
		UnresolvedUnits int64 `json:"unresolved_units"`
	} `json:"ledger"`
	Audit struct {
		Received         int64 `json:"received"`
		Held             int64 `json:"held"`
		Sold             int64 `json:"sold"`
		Available        int64 `json:"available"`
		Oversold         int64 `json:"oversold"`
		LostUnits        int64 `json:"lost_units"`
		InconsistentSKUs int   `json:"inconsistent_skus"`
	} `json:"audit"`
	Counters struct {
		Received     int64 `json:"received"`
		Reserved     int64 `json:"reserved"`
		Sold         int64 `json:"sold"`
		Available    int64 `json:"available"`
		LostVsLedger int64 `json:"lost_vs_ledger"`
	} `json:"counters"`
}

// Verification is the outcome of comparing the three sources over a run.
type Verification struct {
	Oversold          int64          `json:"oversold"`
	Lost              int64          `json:"lost"`
	Sources           SourceTotals   `json:"sources"`
	DisagreementCount int            `json:"disagreement_count"`
	Disagreements     []Disagreement `json:"disagreements"`
	SKUs              []SKUCheck     `json:"skus"`
	// SKUsOmitted counts checks left out of SKUs to keep the JSON small.
	SKUsOmitted int `json:"skus_omitted,omitempty"`
	// Unresolved counts orders whose outcome stayed unknown after
	// reconciliation: the receipts may lack their units, so the sources'
	// agreement proves nothing about them.
	Unresolved int `json:"unresolved"`
	// Unverified marks a run stopped before its verification: only the
	// ledger's figures, from the receipts, are filled, and Oversold and
	// Lost, which nothing checked, are written as null, never as 0.
	Unverified bool `json:"unverified,omitempty"`
}

// MarshalJSON writes oversold and lost as null when they were not verified.
func (v Verification) MarshalJSON() ([]byte, error) {
	type plain Verification
	if !v.Unverified {
		return json.Marshal(plain(v))
	}
	// The outer fields hide plain's of the same name, one level deeper.
	return json.Marshal(struct {
		plain
		Oversold *int64 `json:"oversold"`
		Lost     *int64 `json:"lost"`
	}{plain: plain(v)})
}

// ledgerOnly is the verification of a run stopped before it could be
// verified: what the receipts say of skus, each created with stock units,
// and nothing else.
func ledgerOnly(skus []string, stock int64, rc *Receipts) Verification {
	v := Verification{Unverified: true, Disagreements: []Disagreement{}, Unresolved: rc.Unresolved()}
	v.Sources.Ledger.Orders = rc.Orders()
	for _, sku := range skus {
		u := rc.Units(sku)
		v.Sources.Ledger.Units += u
		v.Sources.Ledger.Oversold += max(0, u-stock)
		v.Sources.Ledger.UnresolvedUnits += rc.UnresolvedUnits(sku)
	}
	return v
}

// summarize totals the per-SKU checks and the ledger's own problems.
func summarize(checks []SKUCheck, ledgerOrders int, ledgerProblems []Disagreement) Verification {
	v := Verification{SKUs: checks, Disagreements: []Disagreement{}}
	if len(checks) > maxListedSKUs {
		v.SKUs = nil
		for _, c := range checks {
			if len(c.Disagreements) > 0 && len(v.SKUs) < maxListedSKUs {
				v.SKUs = append(v.SKUs, c)
			}
		}
		v.SKUsOmitted = len(checks) - len(v.SKUs)
	}
	v.Sources.Ledger.Orders = ledgerOrders
	for _, d := range ledgerProblems {
		v.note(d)
	}
	for _, c := range checks {
		v.Oversold += c.Oversold
		v.Lost += c.Lost
		v.Sources.Ledger.Units += c.LedgerUnits
		v.Sources.Ledger.UnresolvedUnits += c.UnresolvedUnits
		v.Sources.Ledger.Oversold += c.LedgerOversold
		v.Sources.Audit.Received += c.Audit.Received
		v.Sources.Audit.Held += c.Audit.Held
		v.Sources.Audit.Sold += c.Audit.Sold
		v.Sources.Audit.Available += c.Audit.Available
		v.Sources.Audit.Oversold += c.AuditOversold
		v.Sources.Audit.LostUnits += c.AuditLost
		if !c.Audit.Consistent {
			v.Sources.Audit.InconsistentSKUs++
		}
		v.Sources.Counters.Received += c.Counters.Received
		v.Sources.Counters.Reserved += c.Counters.Reserved
		v.Sources.Counters.Sold += c.Counters.Sold
		v.Sources.Counters.Available += c.Counters.Available
		v.Sources.Counters.LostVsLedger += c.CountersLost
		for _, d := range c.Disagreements {
			v.note(d)
		}
	}
	return v
}

// note counts d and lists it while fewer than maxListedDisagreements are
// listed: every finding, wherever it is made, goes through here so that
// the JSON stays bounded and the count exact.
func (v *Verification) note(d Disagreement) {
	v.DisagreementCount++
	if len(v.Disagreements) < maxListedDisagreements {
		v.Disagreements = append(v.Disagreements, d)
	}
}

// Safe reports whether the run was verified, nothing was oversold or lost,
// all sources agree and every order's outcome is known.
func (v Verification) Safe() bool { return !v.Unverified && !v.Damaged() && v.Unresolved == 0 }

// Damaged reports whether the verification found anything oversold or
// lost, or sources that disagree. A run stopped before its verification is
// never Damaged, whatever its answers contradicted until then: it counts
// neither safe nor unsafe. A verification neither Safe nor Damaged is
// unverified or inconclusive.
func (v Verification) Damaged() bool {
	return !v.Unverified && (v.Oversold > 0 || v.Lost > 0 || v.DisagreementCount > 0)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// verifyParallel bounds the audit and counter reads in flight at once.
const verifyParallel = 16

// Verify reads every SKU's audit and counters from base and checks them
// against the receipts, for SKUs each created with stock units, allowing
// on each SKU for the units of the orders the receipts hold as unresolved
// (Receipts.MarkUnresolved). Unfenced
// (fenced false), the store never stamps a token on the row, so the row's
// token lagging the answers' is no finding.
func Verify(ctx context.Context, c *client.Client, base string, skus []string, stock int64, rc *Receipts, fenced bool) (Verification, error) {
	checks := make([]SKUCheck, len(skus))
	err := ForEach(ctx, len(skus), verifyParallel, func(ctx context.Context, i int) error {
		sku := skus[i]
		a, err := c.Audit(ctx, base, sku)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		st, err := c.GetSKU(ctx, base, sku)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		ch := checkSKU(sku, stock, rc.Units(sku), rc.UnresolvedUnits(sku), rc.MaxToken(sku), a, st)
		if !fenced {
			ch.Disagreements = slices.DeleteFunc(ch.Disagreements, func(d Disagreement) bool { return d.Kind == "fence_token_regressed" })
		}
		checks[i] = ch
		return nil
	})
	if err != nil {
		return Verification{}, err
	}
	v := summarize(checks, rc.Orders(), rc.Problems())
	v.Unresolved = rc.Unresolved()
	return v, nil
}

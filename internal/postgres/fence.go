package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/inventory"
)

// errNoRows marks a conditional statement that matched fewer rows than
// asked; the caller says which domain error that is.
var errNoRows = errors.New("no rows matched")

type fenceArgs struct {
	skus    textArray
	tokens  int64Array
	holders uuidArray
}

func argsOf(fences []inventory.Fence) fenceArgs {
	a := fenceArgs{skus: make(textArray, len(fences)), tokens: make(int64Array, len(fences)),
		holders: make(uuidArray, len(fences))}
	for i, f := range fences {
		a.skus[i], a.tokens[i], a.holders[i] = f.SKU, int64(f.Token), f.Holder
	}
	return a
}

// Claim implements inventory.Store. With fencing on it is one UPDATE that
// stamps the lease's token and id on every row whose fence is older (or is
// already this lease's), autocommitted so the claim is visible at once. Read
// then write is not enough on its own: a paused older holder's write could
// land between this holder's read and write and be overwritten; after the
// claim, that older write finds a newer fence and matches nothing.
func (s *Store) Claim(ctx context.Context, fences []inventory.Fence, create bool) (map[string]inventory.SKU, error) {
	a := argsOf(fences)
	db := s.db.WithContext(ctx)
	if create {
		// A new row starts at token 0, below any real token: creating it is
		// not a write anyone could be fenced out of.
		if err := db.Exec(`INSERT INTO skus (sku) SELECT unnest(?::text[]) ON CONFLICT (sku) DO NOTHING`, a.skus).Error; err != nil {
			return nil, translate("create sku", err)
		}
	}
	var rows []skuRow
	var err error
	if s.fencing {
		err = db.Raw(`UPDATE skus AS s SET fence_token = f.token, fence_holder = f.holder, updated_at = now()
			FROM unnest(?::text[], ?::bigint[], ?::uuid[]) AS f(sku, token, holder)
			WHERE s.sku = f.sku AND (s.fence_token < f.token OR (s.fence_token = f.token AND s.fence_holder = f.holder))
			RETURNING s.sku, s.available, s.reserved, s.sold, s.received, s.fence_token, s.updated_at`,
			a.skus, a.tokens, a.holders).Scan(&rows).Error
	} else {
		err = db.Raw(`SELECT sku, available, reserved, sold, received, fence_token, updated_at
			FROM skus WHERE sku = ANY(?::text[])`, a.skus).Scan(&rows).Error
	}
	if err != nil {
		return nil, translate("claim", err)
	}
	out := make(map[string]inventory.SKU, len(rows))
	for _, r := range rows {
		out[r.SKU] = r.domain()
	}
	if len(out) == len(fences) {
		return out, nil
	}
	return nil, s.whyMissing(ctx, a.skus, out)
}

// whyMissing tells an unknown SKU from one fenced by a newer lease.
func (s *Store) whyMissing(ctx context.Context, skus []string, got map[string]inventory.SKU) error {
	var existing []string
	if err := s.db.WithContext(ctx).Raw(`SELECT sku FROM skus WHERE sku = ANY(?::text[])`, textArray(skus)).
		Scan(&existing).Error; err != nil {
		return translate("claim", err)
	}
	for _, sku := range skus {
		if _, ok := got[sku]; ok {
			continue
		}
		if !slices.Contains(existing, sku) {
			return &inventory.SKUError{SKU: sku, Err: inventory.ErrUnknownSKU}
		}
		return &inventory.SKUError{SKU: sku, Err: inventory.ErrStaleFence}
	}
	return fmt.Errorf("postgres: claim: %w", errNoRows)
}

// Write implements inventory.Store: one transaction, status change first,
// then the counters under `fence_token = token AND fence_holder = lease`,
// then the order. Any shortfall rolls the whole transaction back.
func (s *Store) Write(ctx context.Context, fences []inventory.Fence, w inventory.Write) error {
	byKey := make(map[string]inventory.Fence, len(fences))
	for _, f := range fences {
		byKey[f.SKU] = f
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if t := w.Transition; t != nil {
			res := tx.Exec(`UPDATE orders SET status = ? WHERE id = ? AND status = ?`, string(t.To), t.ID, string(t.From))
			if res.Error != nil {
				return translate("order status", res.Error)
			}
			if res.RowsAffected != 1 {
				return fmt.Errorf("postgres: order %s: %w", t.ID, inventory.ErrInvalidTransition)
			}
		}
		if err := s.writeCounters(tx, w.SKUs, byKey); err != nil {
			return err
		}
		if w.Order != nil {
			return insertOrder(tx, w.Order)
		}
		return nil
	})
}

func (s *Store) writeCounters(tx *gorm.DB, skus []inventory.SKU, fences map[string]inventory.Fence) error {
	n := len(skus)
	names := make(textArray, n)
	avail, resv, sold, recv, tokens := make(int64Array, n), make(int64Array, n), make(int64Array, n), make(int64Array, n), make(int64Array, n)
	holders := make(uuidArray, n)
	for i, k := range skus {
		f := fences[k.SKU]
		names[i], avail[i], resv[i], sold[i], recv[i] = k.SKU, k.Available, k.Reserved, k.Sold, k.Received
		tokens[i], holders[i] = int64(f.Token), f.Holder
	}
	fence := `AND s.fence_token = v.token AND s.fence_holder = v.holder`
	if !s.fencing {
		fence = "" // the unfenced write a paused holder can land anywhere
	}
	var written []string
	err := tx.Raw(`UPDATE skus AS s SET available = v.available, reserved = v.reserved, sold = v.sold,
			received = v.received, updated_at = now()
		FROM unnest(?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::uuid[])
			AS v(sku, available, reserved, sold, received, token, holder)
		WHERE s.sku = v.sku `+fence+`
		RETURNING s.sku`, names, avail, resv, sold, recv, tokens, holders).Scan(&written).Error
	if err != nil {
		return translate("write counters", err)
	}
	if len(written) == n {
		return nil
	}
	for _, k := range skus {
		if !slices.Contains(written, k.SKU) {
			return &inventory.SKUError{SKU: k.SKU, Err: inventory.ErrStaleFence}
		}
	}
	return fmt.Errorf("postgres: write counters: %w", errNoRows)
}

package postgres

import (
	"context"
)

// KnownSKUs implements inventory.Store: one indexed lookup for all names.
// The request path asks it, before any lock is taken, about the SKUs it has
// not yet seen exist, so an order for a SKU that does not exist never
// reaches a lock server.
func (s *Store) KnownSKUs(ctx context.Context, names []string) (map[string]bool, error) {
	var found []string
	if err := s.db.WithContext(ctx).Raw(`SELECT sku FROM skus WHERE sku = ANY(?::text[])`, textArray(names)).
		Scan(&found).Error; err != nil {
		return nil, translate(ctx, "known skus", err)
	}
	out := make(map[string]bool, len(found))
	for _, n := range found {
		out[n] = true
	}
	return out, nil
}

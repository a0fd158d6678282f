package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/inventory"
)

type orderRow struct {
	ID             uuid.UUID
	IdempotencyKey sql.NullString
	RequestHash    string
	Status         string
	ExpiresAt      time.Time
	CreatedAt      time.Time
}

type lineRow struct {
	SKU        string
	Quantity   int64
	FenceToken int64
}

// insertOrder writes a new order, or completes the pending row that has held
// its idempotency key since the request began, and its lines.
func insertOrder(tx *gorm.DB, o *inventory.Order) error {
	key := sql.NullString{String: o.IdempotencyKey, Valid: o.IdempotencyKey != ""}
	res := tx.Exec(`INSERT INTO orders (id, idempotency_key, request_hash, status, expires_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, expires_at = EXCLUDED.expires_at
		WHERE orders.status = 'pending'`,
		o.ID, key, o.RequestHash, string(o.Status), o.ExpiresAt, o.CreatedAt)
	if res.Error != nil {
		return translate("insert order", res.Error)
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("postgres: order %s is no longer pending: %w", o.ID, inventory.ErrIdempotencyInFlight)
	}
	n := len(o.Lines)
	skus, qty, tokens, pos := make(textArray, n), make(int64Array, n), make(int64Array, n), make(int64Array, n)
	for i, l := range o.Lines {
		skus[i], qty[i], tokens[i], pos[i] = l.SKU, l.Quantity, int64(l.FenceToken), int64(i)
	}
	err := tx.Exec(`INSERT INTO order_lines (order_id, sku, quantity, fence_token, position)
		SELECT ?, * FROM unnest(?::text[], ?::bigint[], ?::bigint[], ?::int[])`, o.ID, skus, qty, tokens, pos).Error
	if err != nil {
		return translate("insert order lines", err)
	}
	return nil
}

// Order implements inventory.Store.
func (s *Store) Order(ctx context.Context, id uuid.UUID) (*inventory.Order, error) {
	return s.orderWhere(ctx, "id = ?", id)
}

func (s *Store) orderWhere(ctx context.Context, cond string, arg any) (*inventory.Order, error) {
	db := s.db.WithContext(ctx)
	var rows []orderRow
	if err := db.Raw(`SELECT id, idempotency_key, request_hash, status, expires_at, created_at
		FROM orders WHERE `+cond, arg).Scan(&rows).Error; err != nil {
		return nil, translate("get order", err)
	}
	if len(rows) == 0 {
		return nil, inventory.ErrUnknownOrder
	}
	r := rows[0]
	var lines []lineRow
	if err := db.Raw(`SELECT sku, quantity, fence_token FROM order_lines WHERE order_id = ? ORDER BY position`, r.ID).
		Scan(&lines).Error; err != nil {
		return nil, translate("get order lines", err)
	}
	o := &inventory.Order{ID: r.ID, Status: inventory.Status(r.Status), ExpiresAt: r.ExpiresAt, CreatedAt: r.CreatedAt,
		IdempotencyKey: r.IdempotencyKey.String, RequestHash: r.RequestHash, Lines: make([]inventory.Line, len(lines))}
	for i, l := range lines {
		o.Lines[i] = inventory.Line{SKU: l.SKU, Quantity: l.Quantity, FenceToken: uint64(l.FenceToken)}
	}
	return o, nil
}

// ReserveKey implements inventory.Store. The unique index on
// idempotency_key is what lets exactly one of several concurrent requests
// with one key through, across every instance.
func (s *Store) ReserveKey(ctx context.Context, o *inventory.Order) (*inventory.Order, error) {
	for range 3 {
		res := s.db.WithContext(ctx).Exec(`INSERT INTO orders (id, idempotency_key, request_hash, status, expires_at, created_at)
			VALUES (?, ?, ?, 'pending', ?, ?) ON CONFLICT (idempotency_key) DO NOTHING`,
			o.ID, o.IdempotencyKey, o.RequestHash, o.ExpiresAt, o.CreatedAt)
		if res.Error != nil {
			return nil, translate("reserve idempotency key", res.Error)
		}
		if res.RowsAffected == 1 {
			return nil, nil
		}
		prev, err := s.orderWhere(ctx, "idempotency_key = ?", o.IdempotencyKey)
		if errors.Is(err, inventory.ErrUnknownOrder) {
			continue // its holder failed and freed it in between: try again
		}
		return prev, err
	}
	return nil, fmt.Errorf("postgres: idempotency key %q: %w", o.IdempotencyKey, inventory.ErrIdempotencyInFlight)
}

// ReleaseKey implements inventory.Store.
func (s *Store) ReleaseKey(ctx context.Context, id uuid.UUID) error {
	if err := s.db.WithContext(ctx).Exec(`DELETE FROM orders WHERE id = ? AND status = 'pending'`, id).Error; err != nil {
		return translate("release idempotency key", err)
	}
	return nil
}

// ExpiredOrders implements inventory.Store.
func (s *Store) ExpiredOrders(ctx context.Context, now time.Time, limit int) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	err := s.db.WithContext(ctx).Raw(`SELECT id FROM orders WHERE status = 'reserved' AND expires_at <= ?
		ORDER BY expires_at LIMIT ?`, now, limit).Scan(&ids).Error
	if err != nil {
		return nil, translate("list expired orders", err)
	}
	return ids, nil
}

// PurgePending implements inventory.Store.
func (s *Store) PurgePending(ctx context.Context, cutoff time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Exec(`DELETE FROM orders WHERE status = 'pending' AND created_at < ?`, cutoff)
	if res.Error != nil {
		return 0, translate("purge pending orders", res.Error)
	}
	return res.RowsAffected, nil
}

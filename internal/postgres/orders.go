package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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

const reserveKeySQL = `INSERT INTO orders (id, idempotency_key, request_hash, status, expires_at, created_at)
	VALUES ($1, $2, $3, 'pending', $4, $5) ON CONFLICT (idempotency_key) DO NOTHING`

// ReserveKey implements inventory.Store. The unique index on
// idempotency_key is what lets exactly one of several concurrent requests
// with one key through, across every instance.
func (s *Store) ReserveKey(ctx context.Context, o *inventory.Order) (*inventory.Order, error) {
	for range 3 {
		// Every keyed order pays this statement: pgx, like the hot path (see pgx.go).
		var inserted int64
		err := s.withPgx(ctx, func(c *pgx.Conn) error {
			tag, err := c.Exec(ctx, reserveKeySQL, o.ID, o.IdempotencyKey, o.RequestHash, o.ExpiresAt, o.CreatedAt)
			inserted = tag.RowsAffected()
			return err
		})
		if err != nil {
			return nil, translate("reserve idempotency key", err)
		}
		if inserted == 1 {
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
func (s *Store) ExpiredOrders(ctx context.Context, now time.Time, limit int, skip []uuid.UUID) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	err := s.db.WithContext(ctx).Raw(`SELECT id FROM orders WHERE status = 'reserved' AND expires_at <= ?
		AND id <> ALL(?::uuid[]) ORDER BY expires_at LIMIT ?`, now, uuidArray(skip), limit).Scan(&ids).Error
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

package postgres

import (
	"context"
	"database/sql"
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
	var rows []orderRow
	if err := s.db.WithContext(ctx).Raw(`SELECT id, idempotency_key, request_hash, status, expires_at, created_at
		FROM orders WHERE id = ?`, id).Scan(&rows).Error; err != nil {
		return nil, translate(ctx, "get order", err)
	}
	if len(rows) == 0 {
		return nil, inventory.ErrUnknownOrder
	}
	return s.withLines(ctx, rows[0])
}

// withLines reads the lines of the order in r.
func (s *Store) withLines(ctx context.Context, r orderRow) (*inventory.Order, error) {
	var lines []lineRow
	if err := s.db.WithContext(ctx).Raw(`SELECT sku, quantity, fence_token FROM order_lines WHERE order_id = ? ORDER BY position`, r.ID).
		Scan(&lines).Error; err != nil {
		return nil, translate(ctx, "get order lines", err)
	}
	o := &inventory.Order{ID: r.ID, Status: inventory.Status(r.Status), ExpiresAt: r.ExpiresAt, CreatedAt: r.CreatedAt,
		IdempotencyKey: r.IdempotencyKey.String, RequestHash: r.RequestHash, Lines: make([]inventory.Line, len(lines))}
	for i, l := range lines {
		o.Lines[i] = inventory.Line{SKU: l.SKU, Quantity: l.Quantity, FenceToken: uint64(l.FenceToken)}
	}
	return o, nil
}

const ordersByKeySQL = `SELECT id, idempotency_key, request_hash, status, expires_at, created_at
	FROM orders WHERE idempotency_key = ANY($1)`

// OrdersByKey implements inventory.Store. The key of every keyed request
// that did not go through is looked up (several at once, see
// internal/reservation/keys.go), a replay's among them, so the statement
// runs on pgx like the hot path (see pgx.go); the lines, read only for a
// replay, stay on gorm.
func (s *Store) OrdersByKey(ctx context.Context, keys []string) (map[string]*inventory.Order, error) {
	var found []orderRow
	err := s.withPgx(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, ordersByKeySQL, keys)
		if err != nil {
			return err
		}
		var r orderRow
		_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.IdempotencyKey, &r.RequestHash, &r.Status, &r.ExpiresAt, &r.CreatedAt},
			func() error {
				found = append(found, r)
				return nil
			})
		return err
	})
	if err != nil {
		return nil, translate(ctx, "find orders by idempotency key", err)
	}
	out := make(map[string]*inventory.Order, len(found))
	for _, r := range found {
		o, err := s.withLines(ctx, r)
		if err != nil {
			return nil, err
		}
		out[o.IdempotencyKey] = o
	}
	return out, nil
}

// expiredSQL lists the due orders and their lines in one statement: the
// reaper expires a page of them at once, and a read of each would be two
// round trips an order.
const expiredSQL = `SELECT o.id, o.idempotency_key, o.request_hash, o.status, o.expires_at, o.created_at,
	l.sku, l.quantity, l.fence_token
FROM (SELECT * FROM orders WHERE status = 'reserved' AND expires_at <= $1 AND id <> ALL($2::uuid[])
	ORDER BY expires_at LIMIT $3) o
JOIN order_lines l ON l.order_id = o.id
ORDER BY o.expires_at, o.id, l.position`

// ExpiredOrders implements inventory.Store.
func (s *Store) ExpiredOrders(ctx context.Context, now time.Time, limit int, skip []uuid.UUID) ([]*inventory.Order, error) {
	var out []*inventory.Order
	err := s.withPgx(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		rows, err := c.Query(ctx, expiredSQL, now, uuidBytes(skip), limit)
		if err != nil {
			return err
		}
		var r orderRow
		var l lineRow
		_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.IdempotencyKey, &r.RequestHash, &r.Status, &r.ExpiresAt, &r.CreatedAt,
			&l.SKU, &l.Quantity, &l.FenceToken}, func() error {
			if len(out) == 0 || out[len(out)-1].ID != r.ID {
				out = append(out, &inventory.Order{ID: r.ID, Status: inventory.Status(r.Status), ExpiresAt: r.ExpiresAt,
					CreatedAt: r.CreatedAt, IdempotencyKey: r.IdempotencyKey.String, RequestHash: r.RequestHash})
			}
			o := out[len(out)-1]
			o.Lines = append(o.Lines, inventory.Line{SKU: l.SKU, Quantity: l.Quantity, FenceToken: uint64(l.FenceToken)})
			return nil
		})
		return err
	})
	if err != nil {
		return nil, translate(ctx, "list expired orders", err)
	}
	return out, nil
}

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

// orderSQL reads an order and its lines in one statement: a GET, and every
// confirm and cancel before its batch, read one.
const orderSQL = `SELECT o.id, o.idempotency_key, o.request_hash, o.status, o.expires_at, o.created_at,
	l.sku, l.quantity, l.fence_token
FROM orders o JOIN order_lines l ON l.order_id = o.id
WHERE o.id = $1 ORDER BY l.position`

// Order implements inventory.Store.
func (s *Store) Order(ctx context.Context, id uuid.UUID) (*inventory.Order, error) {
	var found []*inventory.Order
	err := s.withPgx(ctx, func(c *pgx.Conn) error {
		var err error
		found, err = queryOrders(ctx, c, orderSQL, [16]byte(id))
		return err
	})
	if err != nil {
		return nil, translate(ctx, "get order", err)
	}
	if len(found) == 0 {
		return nil, inventory.ErrUnknownOrder
	}
	return found[0], nil
}

// queryOrders runs q, whose rows are an order's columns and then one line's,
// ordered by order and then by line, and returns the orders with their
// lines.
func queryOrders(ctx context.Context, c *pgx.Conn, q string, args ...any) ([]*inventory.Order, error) {
	rows, err := c.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []*inventory.Order
	var r orderRow
	var l lineRow
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.IdempotencyKey, &r.RequestHash, &r.Status, &r.ExpiresAt, &r.CreatedAt,
		&l.SKU, &l.Quantity, &l.FenceToken}, func() error {
		if len(out) == 0 || out[len(out)-1].ID != r.ID {
			// pgx reads times in the process's zone: in UTC, an order reads
			// the same from every instance, and as it was first answered.
			out = append(out, &inventory.Order{ID: r.ID, Status: inventory.Status(r.Status), ExpiresAt: r.ExpiresAt.UTC(),
				CreatedAt: r.CreatedAt.UTC(), IdempotencyKey: r.IdempotencyKey.String, RequestHash: r.RequestHash})
		}
		o := out[len(out)-1]
		o.Lines = append(o.Lines, inventory.Line{SKU: l.SKU, Quantity: l.Quantity, FenceToken: uint64(l.FenceToken)})
		return nil
	})
	return out, err
}

// ordersByKeySQL finds the orders holding any of the keys, with their
// lines, in one statement, like orderSQL.
const ordersByKeySQL = `SELECT o.id, o.idempotency_key, o.request_hash, o.status, o.expires_at, o.created_at,
	l.sku, l.quantity, l.fence_token
FROM orders o JOIN order_lines l ON l.order_id = o.id
WHERE o.idempotency_key = ANY($1) ORDER BY o.id, l.position`

// OrdersByKey implements inventory.Store. The key of every keyed request
// that did not go through is looked up (several at once, see
// internal/reservation/keys.go), a replay's among them, so the statement
// runs on pgx like the hot path (see pgx.go).
func (s *Store) OrdersByKey(ctx context.Context, keys []string) (map[string]*inventory.Order, error) {
	var found []*inventory.Order
	err := s.withPgx(ctx, func(c *pgx.Conn) error {
		var err error
		found, err = queryOrders(ctx, c, ordersByKeySQL, keys)
		return err
	})
	if err != nil {
		return nil, translate(ctx, "find orders by idempotency key", err)
	}
	out := make(map[string]*inventory.Order, len(found))
	for _, o := range found {
		out[o.IdempotencyKey] = o
	}
	return out, nil
}

// expiredSQL lists the due orders and their lines in one statement: the
// reaper expires a page of them at once, and a read of each would be two
// round trips an order. The pages follow (expires_at, id), so the reaper
// can go on past orders it could not expire (their keys held elsewhere)
// to the ones due after them; `expires_at >= $4` lets the partial index
// on expires_at bound the scan, which the row comparison alone does not.
const expiredSQL = `SELECT o.id, o.idempotency_key, o.request_hash, o.status, o.expires_at, o.created_at,
	l.sku, l.quantity, l.fence_token
FROM (SELECT * FROM orders WHERE status = 'reserved' AND expires_at <= $1 AND id <> ALL($2::uuid[])
	AND expires_at >= $4 AND (expires_at, id) > ($4, $5::uuid)
	ORDER BY expires_at, id LIMIT $3) o
JOIN order_lines l ON l.order_id = o.id
ORDER BY o.expires_at, o.id, l.position`

// ExpiredOrders implements inventory.Store.
func (s *Store) ExpiredOrders(ctx context.Context, now time.Time, after inventory.DueCursor, limit int,
	skip []uuid.UUID) ([]*inventory.Order, error) {
	var out []*inventory.Order
	err := s.withPgx(ctx, func(c *pgx.Conn) error {
		var err error
		out, err = queryOrders(ctx, c, expiredSQL, now, uuidBytes(skip), limit, after.ExpiresAt, [16]byte(after.ID))
		return err
	})
	if err != nil {
		return nil, translate(ctx, "list expired orders", err)
	}
	return out, nil
}

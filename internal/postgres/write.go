package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stockguard/stockguard/internal/inventory"
)

// writeSQL is the whole fenced write in one statement, so in one round trip
// and, autocommitted, one transaction without BEGIN and COMMIT: the counters
// under `fence_token = token AND fence_holder = lease`, the optional status
// change, every order with its idempotency key, and every line.
// Data-modifying CTEs all run to completion and share one snapshot.
//
// The lines carry no foreign keys (migrations/00003): this statement is
// what makes their references hold. It inserts each line's order, and each
// line's SKU is one of the SKUs whose rows the guard below requires it to
// have updated (the ledger writes the counters of every SKU its orders
// touched). Checking that again per line, a query and a row lock each, cost
// a hot SKU about 17 µs an order under its lease.
//
// The counters move only if the status change (when there is one) matched:
// counters computed for an order another holder already moved could break a
// CHECK and misname the refusal. An order whose key another order holds is
// skipped by ON CONFLICT, not raised as a unique violation, so the refusal
// can name every such key (whyRefused).
//
// A key that another running write has inserted makes this one wait for
// that write's end, and keys are not under the SKUs' locks: batches of
// different SKUs, from two instances, may share keys. So every write
// inserts its orders in idempotency key order (inKeyOrder): writers then
// wait on each other's keys in one global order, never in a cycle, which
// Postgres would break as a deadlock (40P01) failing a whole batch for one
// order's key.
//
// The final SELECT is the guard: if the fenced UPDATE matched fewer rows
// than it was given (a newer lease claimed one), or a status change
// matched nothing (the order moved first), or an order was skipped, it
// divides by zero, which aborts the statement and with it everything the
// CTEs did; it runs before the lines' insert, which the SELECT does not
// read. The divisor depends on the CTEs' results, so the planner cannot
// fold it into an error at plan time.
const writeSQL = `WITH t AS (
	UPDATE orders AS o SET status = v.to_status
	FROM unnest(?::uuid[], ?::text[], ?::text[]) AS v(id, from_status, to_status)
	WHERE o.id = v.id AND o.status = v.from_status
	RETURNING 1
), c AS (
	UPDATE skus AS s SET available = v.available, reserved = v.reserved, sold = v.sold,
		received = v.received, updated_at = now()
	FROM unnest(?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::uuid[])
		AS v(sku, available, reserved, sold, received, token, holder)
	WHERE s.sku = v.sku /*fence*/ AND (SELECT count(*) FROM t) = ?::bigint
	RETURNING 1
), o AS (
	INSERT INTO orders (id, idempotency_key, request_hash, status, expires_at, created_at)
	SELECT id, NULLIF(key, ''), hash, status, expires, created
	FROM unnest(?::uuid[], ?::text[], ?::text[], ?::text[], ?::timestamptz[], ?::timestamptz[])
		AS u(id, key, hash, status, expires, created)
	ON CONFLICT DO NOTHING
	RETURNING 1
), l AS (
	INSERT INTO order_lines (order_id, sku, quantity, fence_token, position)
	SELECT * FROM unnest(?::uuid[], ?::text[], ?::bigint[], ?::bigint[], ?::int[])
)
SELECT 1 / ((SELECT count(*) FROM c) = ?::bigint AND (SELECT count(*) FROM t) = ?::bigint
	AND (SELECT count(*) FROM o) = ?::bigint)::int`

// fenceCond is what turns the counters UPDATE into a fenced one.
const fenceCond = `AND s.fence_token = v.token AND s.fence_holder = v.holder`

// writeStatements returns the write statement with `?` placeholders (for
// gorm) and numbered ones (for pgx), fenced or not.
func writeStatements(fencing bool) (gormSQL, pgxSQL string) {
	cond := ""
	if fencing {
		cond = fenceCond
	}
	q := strings.Replace(writeSQL, "/*fence*/", cond, 1)
	return q, numbered(q)
}

// writeArgs is a Write flattened into the statement's column arrays.
type writeArgs struct {
	skus                            []string
	avail, resv, sold, recv, tokens []int64
	holders                         []uuid.UUID
	moveIDs                         []uuid.UUID
	moveFrom, moveTo                []string
	orderIDs                        []uuid.UUID
	keys                            []string // "" (NULL in the row) for an order without an idempotency key
	hashes, statuses                []string
	expires, created                []time.Time
	lineOrders                      []uuid.UUID
	lineSKUs                        []string
	lineQty, lineTokens             []int64
	linePos                         []int32
	wantSKUs, wantMoves, wantOrds   int64
}

func newWriteArgs(fences map[string]inventory.Fence, w inventory.Write) writeArgs {
	n := len(w.SKUs)
	a := writeArgs{skus: make([]string, n), avail: make([]int64, n), resv: make([]int64, n), sold: make([]int64, n),
		recv: make([]int64, n), tokens: make([]int64, n), holders: make([]uuid.UUID, n), wantSKUs: int64(n)}
	for i, k := range w.SKUs {
		f := fences[k.SKU]
		a.skus[i], a.avail[i], a.resv[i], a.sold[i], a.recv[i] = k.SKU, k.Available, k.Reserved, k.Sold, k.Received
		a.tokens[i], a.holders[i] = int64(f.Token), f.Holder
	}
	// By id, as the keys are by key: two writes that share orders (only a
	// holder whose fence is already stale can write beside the holder
	// that replaced it) then lock their rows in one order, never a cycle.
	moves := slices.SortedFunc(slices.Values(w.Transitions), func(a, b inventory.Transition) int {
		return bytes.Compare(a.ID[:], b.ID[:])
	})
	for _, t := range moves {
		a.moveIDs = append(a.moveIDs, t.ID)
		a.moveFrom = append(a.moveFrom, string(t.From))
		a.moveTo = append(a.moveTo, string(t.To))
	}
	a.wantMoves = int64(len(w.Transitions))
	a.wantOrds = int64(len(w.Orders))
	for _, o := range inKeyOrder(w.Orders) {
		a.orderIDs = append(a.orderIDs, o.ID)
		a.keys = append(a.keys, o.IdempotencyKey)
		a.hashes = append(a.hashes, o.RequestHash)
		a.statuses = append(a.statuses, string(o.Status))
		a.expires = append(a.expires, o.ExpiresAt)
		a.created = append(a.created, o.CreatedAt)
		for i, l := range o.Lines {
			a.lineOrders = append(a.lineOrders, o.ID)
			a.lineSKUs = append(a.lineSKUs, l.SKU)
			a.lineQty = append(a.lineQty, l.Quantity)
			a.lineTokens = append(a.lineTokens, int64(l.FenceToken))
			a.linePos = append(a.linePos, int32(i))
		}
	}
	return a
}

// inKeyOrder returns orders sorted by idempotency key, keyless ones first
// and ties in arrival order: the order writeSQL inserts them in (the
// function scan of unnest feeds the insert in array order). Lines follow
// their orders; their positions are per order.
func inKeyOrder(orders []*inventory.Order) []*inventory.Order {
	cmp := func(a, b *inventory.Order) int { return strings.Compare(a.IdempotencyKey, b.IdempotencyKey) }
	if slices.IsSortedFunc(orders, cmp) {
		return orders // a batch without keys, or of one order: no copy
	}
	sorted := slices.Clone(orders)
	slices.SortStableFunc(sorted, cmp)
	return sorted
}

// pgx returns the arguments as pgx encodes them: Go slices become binary
// arrays, nil pointers NULLs; UUIDs go as bytes (see uuidBytes).
func (a *writeArgs) pgx() []any {
	return []any{uuidBytes(a.moveIDs), a.moveFrom, a.moveTo,
		a.skus, a.avail, a.resv, a.sold, a.recv, a.tokens, uuidBytes(a.holders), a.wantMoves,
		uuidBytes(a.orderIDs), a.keys, a.hashes, a.statuses, a.expires, a.created,
		uuidBytes(a.lineOrders), a.lineSKUs, a.lineQty, a.lineTokens, a.linePos,
		a.wantSKUs, a.wantMoves, a.wantOrds}
}

// Write implements inventory.Store: one statement (writeSQL), one round
// trip. Any shortfall aborts it as a whole; the error then says why. Being
// one autocommitted statement, it is applied whole or not at all, and any
// error the server answers it with means not at all; only a write sent and
// never answered (unanswered) has an outcome the error cannot tell.
func (s *Store) Write(ctx context.Context, fences []inventory.Fence, w inventory.Write) error {
	if id, ok := movedTwice(w.Transitions); ok {
		// The statement would move it once and its guard would misread
		// the shortfall as a stale fence.
		return fmt.Errorf("postgres: order %s moves twice in one write", id)
	}
	byKey := make(map[string]inventory.Fence, len(fences))
	for _, f := range fences {
		byKey[f.SKU] = f
	}
	a := newWriteArgs(byKey, w)
	sent := false
	err := s.withPgx(ctx, func(c *pgx.Conn) error {
		sent = true
		b := hotBatch()
		b.Queue(s.writePgx, a.pgx()...)
		return c.SendBatch(ctx, b).Close()
	})
	switch {
	case err == nil:
		return nil
	case isGuard(err):
		return s.whyRefused(ctx, &a)
	case sent && unanswered(err):
		return fmt.Errorf("%w (%w)", translate(ctx, "write", err), inventory.ErrOutcomeUnknown)
	}
	return translate(ctx, "write", err)
}

// movedTwice returns an order that ts move more than once.
func movedTwice(ts []inventory.Transition) (uuid.UUID, bool) {
	if len(ts) < 2 {
		return uuid.UUID{}, false // every write of orders alone: no map
	}
	seen := make(map[uuid.UUID]bool, len(ts))
	for _, t := range ts {
		if seen[t.ID] {
			return t.ID, true
		}
		seen[t.ID] = true
	}
	return uuid.UUID{}, false
}

// isGuard reports whether err is writeSQL's guard, the one division in it.
func isGuard(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "22012" // division_by_zero
}

// whyRefused finds, after the fact, which condition stopped a write: a fence
// that no longer stands, orders no longer in the status their transitions
// expect (every one named), or idempotency keys other orders hold. Only the
// refusal path pays for it, but it pays under the leases, and a client's
// retry of a placed order (its key taken) fails its batch's first write:
// so the questions go in one round trip, answered in that order of blame.
func (s *Store) whyRefused(ctx context.Context, a *writeArgs) error {
	var stale []error
	var moved []error
	var taken []string
	var keys []string
	for _, k := range a.keys {
		if k != "" {
			keys = append(keys, k)
		}
	}
	err := s.withPgx(ctx, func(c *pgx.Conn) error {
		b := &pgx.Batch{}
		if s.fencing && len(a.skus) > 0 {
			b.Queue(staleSQL, a.skus, a.tokens, uuidBytes(a.holders)).Query(func(rows pgx.Rows) error {
				var sku string
				var token int64
				var row *int64
				_, err := pgx.ForEachRow(rows, []any{&sku, &token, &row}, func() error {
					// A row gone since the claim (nothing here deletes one)
					// holds no fence of ours either.
					err := fmt.Errorf("%w: the row is gone", inventory.ErrStaleFence)
					if row != nil {
						err = staleFence(*row, token)
					}
					stale = append(stale, &inventory.SKUError{SKU: sku, Err: err})
					return nil
				})
				return err
			})
		}
		if len(a.moveIDs) > 0 {
			b.Queue(movedSQL, uuidBytes(a.moveIDs), a.moveFrom, a.moveTo).Query(func(rows pgx.Rows) error {
				var id uuid.UUID
				var status *string
				var to string
				_, err := pgx.ForEachRow(rows, []any{&id, &status, &to}, func() error {
					from := inventory.Status("absent")
					if status != nil {
						from = inventory.Status(*status)
					}
					moved = append(moved, &inventory.OrderError{ID: id, Err: &inventory.TransitionError{From: from, To: inventory.Status(to)}})
					return nil
				})
				return err
			})
		}
		if len(keys) > 0 {
			b.Queue(takenSQL, keys).Query(func(rows pgx.Rows) error {
				var err error
				taken, err = pgx.CollectRows(rows, pgx.RowTo[string])
				return err
			})
		}
		if b.Len() == 0 {
			return nil
		}
		return c.SendBatch(ctx, b).Close()
	})
	switch {
	case err != nil:
		return translate(ctx, "write", err)
	case len(stale) > 0:
		return refusedRows(stale)
	case len(moved) > 0:
		return errors.Join(moved...)
	case len(taken) > 0:
		return &inventory.KeyTakenError{Keys: taken}
	}
	// Nothing refuses the write any more, yet it was refused: only a status
	// that changed and changed back could do that. Treat it as the fence:
	// nothing was written, and a retry is judged afresh.
	return fmt.Errorf("postgres: write refused: %w", inventory.ErrStaleFence)
}

// whyRefused's questions: the rows whose fence is not the write's, the
// orders not in the status a transition expects (with the one they are
// in, NULL when absent), the keys other orders hold.
const (
	staleSQL = `SELECT v.sku, v.token, s.fence_token FROM unnest($1::text[], $2::bigint[], $3::uuid[]) AS v(sku, token, holder)
	LEFT JOIN skus s ON s.sku = v.sku
	WHERE s.sku IS NULL OR s.fence_token <> v.token OR s.fence_holder IS DISTINCT FROM v.holder`
	movedSQL = `SELECT v.id, o.status, v.to_status FROM unnest($1::uuid[], $2::text[], $3::text[])
	AS v(id, from_status, to_status) LEFT JOIN orders o ON o.id = v.id WHERE o.status IS DISTINCT FROM v.from_status`
	takenSQL = `SELECT idempotency_key FROM orders WHERE idempotency_key = ANY($1::text[])`
)

package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The hot path (Claim and Write, once per batch under the lease) runs on the
// pgx connection underneath gorm's pool rather than through gorm. Measured
// with BenchmarkHotWrite and BenchmarkClaim (one connection, serial, on the
// 2-core Debian machine, which other work kept busy): the same write
// statement through gorm's raw-SQL path cost ≈ 2× the client CPU of pgx
// (360–450 vs 160–220 µs a write, 805 vs 160 allocations) and 14–53 % more
// wall time in every run; the claim ≈ 1.7× the CPU (255–310 vs 140–185 µs).
// Far over the 10 % we allow: the critical section is serial per SKU, so
// every microsecond in it is one less order a second on a hot SKU, and on 2
// cores the client's CPU is taken from Postgres. Gorm stays for everything
// off the critical path. Both share one pool, the database/sql pool gorm
// opened, so the pool size is one number.

// withPgx runs f on the pgx connection of one pooled connection. pgx caches
// each statement it has prepared on that connection, so after the first use
// a statement costs one round trip (Bind, Execute, Sync).
func (s *Store) withPgx(ctx context.Context, f func(*pgx.Conn) error) error {
	return onPgx(ctx, s.sqlDB, f)
}

// onPgx runs f on the pgx connection of one of db's connections.
func onPgx(ctx context.Context, db *sql.DB, f func(*pgx.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return fmt.Errorf("driver connection %T is not pgx", dc)
		}
		return f(c.Conn())
	})
}

// genericPlanSQL, queued before a hot statement in one batch (one round
// trip, one implicit transaction), has the server run that statement on
// its generic plan; the setting ends with the transaction, so gorm's
// statements on the same connection keep the server's choice (some of
// their plans do depend on the values). Each hot statement joins the
// unnest of its parameter arrays to tables on their primary keys, and the
// generic plan (an array estimated at 10 rows) probes those keys in a
// nested loop, as the custom plans do. Yet the server never picks it by
// itself: the custom plans see the arrays' lengths (a placement's empty
// transitions) and are estimated cheaper, so it plans the statement again
// on every execution. EXPLAIN ANALYZE of a 14-order write on the idle
// machine: planning 0.33–0.40 ms, execution 0.6–0.8 ms. Three alternated
// pairs of hot-SKU runs (redlock, three instances), the setting for the
// whole database against none: the write 3.98 / 3.68 / 2.96 ms against
// 3.21 / 2.60 / 3.05, Postgres' CPU an order 160 / 150 / 117 µs against
// 120 / 89 / 120.
const genericPlanSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`

// hotBatch starts a batch whose statements run on their generic plans
// (genericPlanSQL). A batch is one round trip, as a lone statement is.
func hotBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(genericPlanSQL)
	return b
}

// numbered rewrites gorm's `?` placeholders as pgx's `$1, $2, …`, so each
// hot statement is written once and either path can run it (the benchmark
// runs both). None of our SQL uses `?` for anything else.
func numbered(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

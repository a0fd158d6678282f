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

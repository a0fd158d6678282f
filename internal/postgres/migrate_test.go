package postgres

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// TestMigrationsRunUntimed: migrations do not inherit the statement
// timeout of the store's connections, which a whole-table migration could
// outlast.
func TestMigrationsRunUntimed(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, stacktest.NewDatabase(t, ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := untimed(ctx, s.DB())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for name, c := range map[string]struct {
		pool *sql.DB
		want string
	}{"store": {s.DB(), statementTimeout}, "migrations": {db, "0"}} {
		var got string
		if err := c.pool.QueryRowContext(ctx, "SHOW statement_timeout").Scan(&got); err != nil || got != c.want {
			t.Errorf("%s: statement_timeout = %q, %v; want %q", name, got, err, c.want)
		}
	}
}

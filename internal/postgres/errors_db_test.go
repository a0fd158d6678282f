package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// The faults below are made for real on the stack's Postgres: each must
// reach the caller as a sentinel the HTTP layer answers without a 500.

func TestInvalidTextIsInvalid(t *testing.T) {
	s := newStore(t)
	_, err := s.OrdersByKey(context.Background(), []string{"k\xff"})
	if !errors.Is(err, inventory.ErrInvalid) {
		t.Fatalf("a key that is not UTF-8 = %v, want ErrInvalid", err)
	}
}

func TestStatementTimeoutIsUnavailable(t *testing.T) {
	ctx := context.Background()
	dsn := stacktest.NewDatabase(t, ctx)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("statement_timeout", "200") // milliseconds, a runtime parameter of every pooled connection
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := postgres.Migrate(ctx, s.DB()); err != nil {
		t.Fatal(err)
	}
	f := mustStock(t, s, "slow", 5, 1)

	// Another session holds the row: the claim's UPDATE waits for it until
	// the statement timeout cancels it.
	blocker, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(ctx)
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM skus WHERE sku = 'slow' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	f.Token = 2
	_, err = s.Claim(ctx, []inventory.Fence{f}, false)
	if !errors.Is(err, inventory.ErrStoreUnavailable) {
		t.Fatalf("claim past statement_timeout = %v, want ErrStoreUnavailable", err)
	}
}

func TestLostConnectionIsUnavailable(t *testing.T) {
	ctx := context.Background()
	dsn := stacktest.NewDatabase(t, ctx)
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := postgres.Migrate(ctx, s.DB()); err != nil {
		t.Fatal(err)
	}
	mustStock(t, s, "gone", 5, 1)

	// Every connection of the pool is killed and no new one is let in: the
	// pool can neither reuse nor replace its connections.
	name := strings.TrimPrefix(mustURL(t, dsn).Path, "/")
	admin, err := pgx.Connect(ctx, stacktest.RequirePostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	// The test database's cleanup drops it WITH (FORCE), which needs no connection.
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
		t.Fatal(err)
	}
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.SKU(callCtx, "gone"); !errors.Is(err, inventory.ErrStoreUnavailable) {
		t.Fatalf("read with the database gone = %v, want ErrStoreUnavailable", err)
	}
	if _, err := s.Claim(callCtx, []inventory.Fence{fence("gone", 2)}, false); !errors.Is(err, inventory.ErrStoreUnavailable) {
		t.Fatalf("claim with the database gone = %v, want ErrStoreUnavailable", err)
	}
}

func mustURL(t *testing.T, dsn string) *url.URL {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestUnmigratedSchemaIsUnavailable: an instance started with
// --migrate=false before its migration job ran finds no tables. That is
// the database not ready for this binary, a 503 to retry (as /readyz
// says), not a 500.
func TestUnmigratedSchemaIsUnavailable(t *testing.T) {
	ctx := context.Background()
	s, err := postgres.Open(ctx, stacktest.NewDatabase(t, ctx))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.SKU(callCtx, "any"); !errors.Is(err, inventory.ErrStoreUnavailable) {
		t.Fatalf("read before the migrations = %v, want ErrStoreUnavailable", err)
	}
	if _, err := s.Claim(callCtx, []inventory.Fence{fence("any", 2)}, false); !errors.Is(err, inventory.ErrStoreUnavailable) {
		t.Fatalf("claim before the migrations = %v, want ErrStoreUnavailable", err)
	}
}

package postgres

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
	"github.com/stockguard/stockguard/migrations"
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

// TestLinesForeignKeysDropped: migration 3 drops order_lines' foreign keys
// (writeSQL is what keeps lines' references), and its down step puts both
// back, so a rollback finds the schema it left.
func TestLinesForeignKeysDropped(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, stacktest.NewDatabase(t, ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Migrate(ctx, s.DB()); err != nil {
		t.Fatal(err)
	}
	fks := func() int {
		t.Helper()
		var n int
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_constraint
			WHERE conrelid = 'order_lines'::regclass AND contype = 'f'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := fks(); n != 0 {
		t.Fatalf("order_lines has %d foreign keys after the migrations, want 0", n)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, s.DB(), migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if n := fks(); n != 2 {
		t.Fatalf("order_lines has %d foreign keys after migration 3's down step, want 2", n)
	}
}

// TestMigrationGivesUpWaitingForALock: a migration that must wait for a
// table lock behind an open reader gives up after migrationLockTimeout,
// rather than queue every claim and write of the serving instances behind
// its ACCESS EXCLUSIVE request; a later try, with the reader gone, applies.
func TestMigrationGivesUpWaitingForALock(t *testing.T) {
	defer func(d time.Duration) { migrationLockTimeout = d }(migrationLockTimeout)
	migrationLockTimeout = 300 * time.Millisecond
	ctx := context.Background()
	s, err := Open(ctx, stacktest.NewDatabase(t, ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, s.DB(), migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 2); err != nil {
		t.Fatal(err)
	}
	reader, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.ExecContext(ctx, "SELECT count(*) FROM skus"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Migrate(ctx, s.DB()) // 00003 drops foreign keys onto skus: ACCESS EXCLUSIVE there
	if err == nil || !strings.Contains(err.Error(), "lock timeout") || time.Since(start) > 5*time.Second {
		t.Fatalf("migration behind an open reader of skus = %v after %v; want a lock timeout", err, time.Since(start))
	}
	if _, err := reader.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := Migrate(ctx, s.DB()); err != nil {
		t.Fatalf("migration once the reader is gone: %v", err)
	}
}

// TestConcurrentMigrations: instances start at once on an empty database,
// each migrating while the other's readiness probes ping: both migrations
// succeed (the advisory lock serialises them), and both end ready. Two, as
// each more waits goose's lock retry interval (5 s) once more.
func TestConcurrentMigrations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := stacktest.NewDatabase(t, ctx)
	const n = 2
	stores := make([]*Store, n)
	for i := range stores {
		s, err := Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, s := range stores {
		wg.Go(func() { _, errs[i] = Migrate(ctx, s.DB()) })
		wg.Go(func() { _ = s.Ping(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d: migrate: %v", i, err)
		}
	}
	for i, s := range stores {
		if err := s.Ping(ctx); err != nil {
			t.Errorf("instance %d: ping after the migrations: %v", i, err)
		}
	}
}

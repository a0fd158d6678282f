package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/stockguard/stockguard/migrations"
)

// Migrate applies every pending migration. A session advisory lock makes it
// safe for several instances starting at once. The migrations run on
// connections of their own (untimed), without the statement timeout of the
// store's: a migration may rewrite, check or index a whole table.
func Migrate(ctx context.Context, db *sql.DB) ([]string, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	mdb, err := untimed(ctx, db)
	if err != nil {
		return nil, translate(ctx, "migrate", err)
	}
	defer mdb.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, mdb, migrations.FS, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	applied := make([]string, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Path)
	}
	return applied, nil
}

// migrationLockTimeout bounds how long a migration waits for a table lock.
// A DDL statement queued for its ACCESS EXCLUSIVE lock behind a long reader
// (an audit) makes every later claim and write of the serving instances
// queue behind it in turn; giving up fails this instance's start, which a
// restart retries, instead of stalling the fleet. A var for the tests.
var migrationLockTimeout = 5 * time.Second

// untimed opens a pool like db's, whose connections have no statement
// timeout, from the config of one of db's connections; their lock waits
// are bounded by migrationLockTimeout.
func untimed(ctx context.Context, db *sql.DB) (*sql.DB, error) {
	var cfg *pgx.ConnConfig
	if err := onPgx(ctx, db, func(c *pgx.Conn) error {
		cfg = c.Config() // a copy, its map included
		return nil
	}); err != nil {
		return nil, err
	}
	cfg.RuntimeParams["statement_timeout"] = "0"
	cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(migrationLockTimeout.Milliseconds(), 10)
	return stdlib.OpenDB(*cfg), nil
}

// ErrMigrationsPending is what Ping answers while the schema lags the
// migrations this binary carries: the instance is not ready to serve.
var ErrMigrationsPending = errors.New("postgres: migrations pending")

// checkMigrated returns ErrMigrationsPending if a migration is not applied.
// It takes no lock, so it never waits for a migration in progress.
func checkMigrated(ctx context.Context, db *sql.DB) error {
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		return fmt.Errorf("postgres: migrations: %w", err)
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return translate(ctx, "migrations", err)
	}
	if pending {
		return ErrMigrationsPending
	}
	return nil
}

package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/stockguard/stockguard/migrations"
)

// Migrate applies every pending migration. A session advisory lock makes it
// safe for several instances starting at once.
func Migrate(ctx context.Context, db *sql.DB) ([]string, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(locker))
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
		return translate("migrations", err)
	}
	if pending {
		return ErrMigrationsPending
	}
	return nil
}

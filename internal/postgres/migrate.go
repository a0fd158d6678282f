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
func Migrate(ctx context.Context, db *sql.DB, opts ...MigrateOption) ([]string, error) {
	var cfg migrateConfig
	for _, o := range opts {
		o(&cfg)
	}
	var locker lock.SessionLocker
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	if cfg.waiting != nil {
		locker = reportingLocker{SessionLocker: locker, db: db, cfg: cfg}
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

// MigrateOption configures Migrate.
type MigrateOption func(*migrateConfig)

type migrateConfig struct {
	every   time.Duration
	waiting func(holderPID int, waited time.Duration)
}

// WithLockWaitReport has Migrate call waiting when it finds the migration
// lock held by another session, then every interval while it still waits:
// without it a start queued behind another instance's migrations says
// nothing for up to goose's five minutes. holderPID is the holding
// session's backend pid, 0 when it could not be read.
func WithLockWaitReport(every time.Duration, waiting func(holderPID int, waited time.Duration)) MigrateOption {
	return func(c *migrateConfig) { c.every, c.waiting = every, waiting }
}

// reportingLocker tries the migration lock once itself, so that it knows
// whether it waits, and reports while goose's locker retries.
type reportingLocker struct {
	lock.SessionLocker
	db  *sql.DB // for the holder's pid: conn is busy with the retries
	cfg migrateConfig
}

func (l reportingLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	var got bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", lock.DefaultLockID).Scan(&got); err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	if got {
		return nil
	}
	start := time.Now()
	stop := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		t := time.NewTicker(l.cfg.every)
		defer t.Stop()
		for {
			l.cfg.waiting(l.holder(ctx), time.Since(start))
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	err := l.SessionLocker.SessionLock(ctx, conn)
	close(stop)
	<-reported
	return err
}

// holder is the pid of the session holding the migration lock, 0 if none
// or unknown.
func (l reportingLocker) holder(ctx context.Context) int {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var pid int
	_ = l.db.QueryRowContext(qctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND ((classid::bigint << 32) | objid::bigint) = $1 LIMIT 1`, lock.DefaultLockID).Scan(&pid)
	return pid
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

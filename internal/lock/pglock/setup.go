package pglock

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/internal/lock"
)

// The fence sequence is created outside the migrations because the lock
// backend must work against any database the service points it at, before and
// independently of the store's schema.
const (
	probeSQL = `SELECT current_setting('server_version_num')::int, to_regclass('stockguard_lock_fence') IS NOT NULL`

	// CREATE SEQUENCE IF NOT EXISTS is not safe against a concurrent creator:
	// both see no sequence and the loser fails with a unique violation on
	// pg_type or pg_class. A session advisory lock serialises the creators;
	// the create runs in a transaction of its own, started after the lock is
	// granted, so a waiter sees the winner's committed sequence and does
	// nothing. The key's namespace ("stockguard-ddl:") cannot meet a lock
	// key's ("stockguard:" || key).
	ddlLockSQL   = `SELECT pg_advisory_lock(hashtextextended('stockguard-ddl:stockguard_lock_fence', 0))`
	ddlUnlockSQL = `SELECT pg_advisory_unlock(hashtextextended('stockguard-ddl:stockguard_lock_fence', 0))`
	createSQL    = `CREATE SEQUENCE IF NOT EXISTS stockguard_lock_fence`

	// Only a sequence without a per-session cache hands out values in the
	// order they are taken across sessions; with CACHE n each session
	// reserves a block and a later holder can draw a smaller number.
	checkSQL = `SELECT seqincrement, seqcycle, seqcache FROM pg_sequence WHERE seqrelid = 'stockguard_lock_fence'::regclass`
)

// minServerVersion is PostgreSQL 14, the first with idle_session_timeout.
const minServerVersion = 140000

// setup checks the server and makes sure the fence sequence exists and fits.
func setup(ctx context.Context, pool *pgxpool.Pool) (err error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", lock.ErrUnavailable, err)
	}
	defer func() {
		if err != nil {
			// The session may still hold the DDL lock: end it rather than
			// hand it back to the pool.
			destroy(c)
			return
		}
		c.Release()
	}()

	var version int
	var exists bool
	if err := c.QueryRow(ctx, probeSQL).Scan(&version, &exists); err != nil {
		return fmt.Errorf("%w: %w", lock.ErrUnavailable, err)
	}
	if version < minServerVersion {
		return fmt.Errorf("PostgreSQL %d.%d is too old: leases expire through idle_session_timeout, which needs 14 or later",
			version/10000, version%10000)
	}
	if !exists {
		if _, err := c.Exec(ctx, ddlLockSQL); err != nil {
			return fmt.Errorf("%w: %w", lock.ErrUnavailable, err)
		}
		if _, err := c.Exec(ctx, createSQL); err != nil {
			return fmt.Errorf("create sequence stockguard_lock_fence: %w", err)
		}
		if _, err := c.Exec(ctx, ddlUnlockSQL); err != nil {
			return fmt.Errorf("%w: %w", lock.ErrUnavailable, err)
		}
	}

	var increment int64
	var cycle bool
	var cache int64
	if err := c.QueryRow(ctx, checkSQL).Scan(&increment, &cycle, &cache); err != nil {
		return fmt.Errorf("inspect sequence stockguard_lock_fence: %w", err)
	}
	if increment <= 0 || cycle || cache != 1 {
		return fmt.Errorf("sequence stockguard_lock_fence (increment %d, cycle %t, cache %d) would not give increasing tokens; "+
			"it needs a positive INCREMENT, NO CYCLE and CACHE 1", increment, cycle, cache)
	}
	return nil
}

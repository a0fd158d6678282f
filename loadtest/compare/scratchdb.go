package compare

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// DefaultDatabaseURL is the service's own --database-url default, used when
// neither --database-url nor the environment names one.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5433/stockguard?sslmode=disable"

// ScratchDatabase creates an empty database on the server baseURL points
// at and returns its URL and a function that drops it.
//
// A run (a backend of compare, the bench suite) runs in its own database because the shared one collects other
// runs' orders: holds that expired on SKUs fenced by another backend's
// token space can never be reaped by this backend (stale fence), so every
// instance's reaper would retry them every second, in the middle of the
// measurement. A leftover (the suite killed) is named stockguard_scratch_*.
func ScratchDatabase(ctx context.Context, baseURL string) (string, func(), error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Scheme == "" {
		return "", nil, fmt.Errorf("database url %q: want postgres://…", baseURL)
	}
	name := "stockguard_scratch_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	if err := adminExec(ctx, baseURL, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("scratch database: %w", err)
	}
	scratch := *u
	scratch.Path = "/" + name
	drop := func() {
		// A fresh context: the suite's may be cancelled. FORCE ends the
		// connections of instances that did not exit cleanly.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = adminExec(ctx, baseURL, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return scratch.String(), drop, nil
}

// adminExec runs one statement on its own connection (CREATE DATABASE
// cannot run inside a transaction or a pool's prepared-statement cache).
func adminExec(ctx context.Context, databaseURL, sql string) error {
	c, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	return err
}

package main

import (
	"context"
	"database/sql"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3/lock"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// TestSIGTERMWhileWaitingForMigrations: serve started while another
// session holds the migration lock says that it waits, and SIGTERM during
// that wait is a clean stop (exit 0, logged), as it is while serving.
func TestSIGTERMWhileWaitingForMigrations(t *testing.T) {
	ctx := context.Background()
	dbURL := stacktest.NewDatabase(t, ctx)
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_lock($1)", lock.DefaultLockID); err != nil {
		t.Fatal(err)
	}

	cmd, _, logs, done := startStockguard(t, []string{"STOCKGUARD_DATABASE_URL=" + dbURL, "STOCKGUARD_LOG_LEVEL=info"},
		"serve", "--addr=127.0.0.1:0", "--lock=local")
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), "waiting for the migration lock"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no word of the wait within 20 s:\n%s", logs)
		}
	}
	if strings.Contains(logs.String(), `"holder_pid":0`) {
		t.Errorf("the holder's pid is not named:\n%s", logs)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20 s after SIGTERM:\n%s", logs)
	}
	if got := exitStatus(t, err); got != 0 || !strings.Contains(logs.String(), "stopped while starting") {
		t.Fatalf("exit %d after SIGTERM while waiting for the migration lock, want 0 and a log line:\n%s", got, logs)
	}
}

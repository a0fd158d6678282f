package main

import (
	"context"
	"database/sql"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// TestReaperWaitsForMigrations: serve --migrate=false on a database whose
// migration job has not run yet says once that its reaper waits, not an
// error every tick for the tables it cannot find, and expires holds once
// the schema is there.
func TestReaperWaitsForMigrations(t *testing.T) {
	dbURL := stacktest.NewDatabase(t, context.Background())
	in := startInstance(t, []string{"STOCKGUARD_DATABASE_URL=" + dbURL, "STOCKGUARD_LOG_LEVEL=info"},
		"--lock=local", "--migrate=false", "--reap-interval=50ms")
	time.Sleep(time.Second) // some twenty ticks
	if logs := in.log(); strings.Contains(logs, `"level":"ERROR"`) || strings.Count(logs, "reaper: waiting for the migrations") != 1 {
		t.Fatalf("before the migrations, want one warning of the reaper's wait and no error:\n%s", logs)
	}
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"migrate", "--database-url", dbURL}, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("migrate: %v\n%s", err, errOut.String())
	}
	if st, body := call(t, "PUT", in.url+"/v1/skus/reap-after-migrate", `{"available":5}`); st != 200 {
		t.Fatalf("PUT: %d %v", st, body)
	}
	st, o := call(t, "POST", in.url+"/v1/orders", `{"lines":[{"sku":"reap-after-migrate","quantity":1}],"hold_seconds":1}`)
	if st != 201 {
		t.Fatalf("order: %d %v", st, o)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, got := call(t, "GET", in.url+"/v1/orders/"+o["order_id"].(string), ""); got["status"] == "expired" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hold was not expired within 10 s of its end:\n%s", in.log())
		}
	}
	if !in.waitLog("reaper: migrations applied", 5*time.Second) {
		t.Errorf("no word that the reaper started:\n%s", in.log())
	}
}

// TestReaperWaitsForMigrationsThroughABlip: a database that refuses
// connections for a moment while the reaper waits for the migration job
// says nothing of the job. The reaper keeps waiting in its one warning; it
// does not announce migrations nobody applied, then log an error every
// tick for the tables still missing.
func TestReaperWaitsForMigrationsThroughABlip(t *testing.T) {
	dbURL := stacktest.NewDatabase(t, context.Background())
	in := startInstance(t, []string{"STOCKGUARD_DATABASE_URL=" + dbURL, "STOCKGUARD_LOG_LEVEL=info"},
		"--lock=local", "--migrate=false", "--reap-interval=50ms")
	if !in.waitLog("reaper: waiting for the migrations", 5*time.Second) {
		t.Fatalf("no warning of the reaper's wait:\n%s", in.log())
	}
	restore := refuseConnections(t, dbURL)
	time.Sleep(200 * time.Millisecond) // a few ticks with the database refusing connections
	restore()
	time.Sleep(time.Second) // some twenty ticks with the database back, still not migrated
	logs := in.log()
	if strings.Contains(logs, "reaper: migrations applied") || strings.Contains(logs, `"level":"ERROR","msg":"reaper:`) ||
		strings.Count(logs, "reaper: waiting for the migrations") != 1 {
		t.Fatalf("after a blip while waiting (schema still not migrated), want the one warning, no word of migrations applied, no reaper error:\n%s", logs)
	}
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"migrate", "--database-url", dbURL}, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("migrate: %v\n%s", err, errOut.String())
	}
	if !in.waitLog("reaper: migrations applied", 5*time.Second) {
		t.Errorf("no word that the reaper started once the migrations ran:\n%s", in.log())
	}
}

// TestSIGTERMWhileTheReaperWaitsThroughAnOutage: the reaper's wait for the
// migrations outlasts an outage of the database, and SIGTERM still ends
// serve at once, cleanly.
func TestSIGTERMWhileTheReaperWaitsThroughAnOutage(t *testing.T) {
	dbURL := stacktest.NewDatabase(t, context.Background())
	in := startInstance(t, []string{"STOCKGUARD_DATABASE_URL=" + dbURL, "STOCKGUARD_LOG_LEVEL=info"},
		"--lock=local", "--migrate=false", "--reap-interval=50ms")
	if !in.waitLog("reaper: waiting for the migrations", 5*time.Second) {
		t.Fatalf("no warning of the reaper's wait:\n%s", in.log())
	}
	defer refuseConnections(t, dbURL)()
	time.Sleep(200 * time.Millisecond)
	if d := in.sigterm(t, 10*time.Second); d > 2*time.Second {
		t.Errorf("SIGTERM while the reaper waits through an outage took %s:\n%s", d, in.log())
	}
}

// refuseConnections makes the database of dbURL refuse new connections and
// ends those open to it, as a restarting server does, until the function
// it returns is called.
func refuseConnections(t *testing.T, dbURL string) (restore func()) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ident := pgx.Identifier{cfg.Database}.Sanitize()
	admin, err := sql.Open("pgx", stacktest.RequirePostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		if _, err := admin.ExecContext(context.Background(), q, args...); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
	exec("ALTER DATABASE " + ident + " ALLOW_CONNECTIONS false")
	exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", cfg.Database)
	return func() {
		exec("ALTER DATABASE " + ident + " ALLOW_CONNECTIONS true")
		_ = admin.Close()
	}
}

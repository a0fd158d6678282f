package stack_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/stack"
)

// TestPostgresStopStart: a committed row survives a fast shutdown and a
// start on the same port, a connection open across the restart is closed
// by the server, and new connections work again.
func TestPostgresStopStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := stack.StartPostgres(ctx, t.TempDir())
	mustStart(t, err)
	t.Cleanup(func() { _ = p.Close() })

	dsn, err := p.CreateDatabase(ctx, "sg_private")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}

	pid := p.PID()
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if p.PID() != 0 {
		t.Fatalf("PID %d after Stop, want 0", p.PID())
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("postmaster %d still exists after Stop (kill -0: %v)", pid, err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("a connection opened before the fast shutdown still answers")
	}
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := p.Start(ctx); err == nil {
		t.Fatal("Start of a running server succeeded")
	}
	again, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect after Start: %v", err)
	}
	defer again.Close(context.Background())
	var v int
	if err := again.QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 42 {
		t.Fatalf("row after restart: %d, %v; want 42", v, err)
	}
	if p.PID() == 0 || p.PID() == pid {
		t.Fatalf("PID %d after Start (was %d)", p.PID(), pid)
	}
}

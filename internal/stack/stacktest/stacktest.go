// Package stacktest gives tests the local stack's servers: it checks that
// they answer and fails (or, on request, skips) with the command that starts
// them, and hands each test a database of its own. It is kept apart from
// package stack so the binaries that drive servers never link "testing".
package stacktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/stockguard/stockguard/internal/stack"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvSkipIntegration, set to 1, turns the Require helpers' failure into a
// skip, for machines that cannot run the stack.
const EnvSkipIntegration = "STOCKGUARD_SKIP_INTEGRATION"

// requireTimeout bounds each Require helper's probe: the stack answers in
// milliseconds when it runs, and a test should not hang when it does not.
const requireTimeout = 2 * time.Second

// RequireRedis checks that every Redis master of the shared stack answers
// PING and returns their addresses. If one does not, the test fails with the
// command that starts the stack (or is skipped when
// STOCKGUARD_SKIP_INTEGRATION=1).
func RequireRedis(tb testing.TB) []string {
	tb.Helper()
	addrs := stack.RedisAddrs()
	if err := probeAll(tb, addrs, stack.PingRedis); err != nil {
		unavailable(tb, "Redis", err)
	}
	return addrs
}

// RequireZK checks that every ZooKeeper server of the shared stack serves
// requests (leader or follower) and returns their addresses; on failure it
// behaves like RequireRedis.
func RequireZK(tb testing.TB) []string {
	tb.Helper()
	addrs := stack.ZKServers()
	if err := probeAll(tb, addrs, func(ctx context.Context, addr string) error {
		_, err := stack.ZKMode(ctx, addr)
		return err
	}); err != nil {
		unavailable(tb, "ZooKeeper", err)
	}
	return addrs
}

// RequireEtcd checks that every etcd member of the shared stack is healthy
// and knows a leader, and returns their client addresses; on failure it
// behaves like RequireRedis.
func RequireEtcd(tb testing.TB) []string {
	tb.Helper()
	addrs := stack.EtcdEndpoints()
	if err := probeAll(tb, addrs, func(ctx context.Context, addr string) error {
		_, err := stack.EtcdRole(ctx, addr)
		return err
	}); err != nil {
		unavailable(tb, "etcd", err)
	}
	return addrs
}

// RequirePostgres checks that the shared stack's Postgres accepts a
// connection and returns its URL; on failure it behaves like RequireRedis.
func RequirePostgres(tb testing.TB) string {
	tb.Helper()
	dsn := stack.DatabaseURL()
	if err := probeAll(tb, []string{dsn}, PingPostgres); err != nil {
		unavailable(tb, "Postgres", err)
	}
	return dsn
}

// NewDatabase creates an empty database with a unique name (sg_test_<hex>)
// on the shared stack's Postgres and returns its URL, so a test can apply
// migrations without seeing other tests' rows. The database is dropped,
// with any connection still open to it, when the test ends.
func NewDatabase(tb testing.TB, ctx context.Context) string {
	tb.Helper()
	base := RequirePostgres(tb)
	var b [8]byte
	_, _ = rand.Read(b[:]) // documented never to return an error
	name := "sg_test_" + hex.EncodeToString(b[:])
	dsn, err := withDatabase(base, name)
	if err != nil {
		tb.Fatalf("stack: %v", err)
	}
	ident := pgx.Identifier{name}.Sanitize()
	if err := execAdmin(ctx, base, "CREATE DATABASE "+ident); err != nil {
		tb.Fatalf("stack: create test database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		// The test's context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := execAdmin(ctx, base, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			tb.Errorf("stack: drop test database %s: %v", name, err)
		}
	})
	return dsn
}

// PingPostgres reports whether Postgres at dsn accepts a connection and a
// ping before ctx ends.
func PingPostgres(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if err := conn.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

func execAdmin(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase points dsn, a URL or a keyword/value string, at database name.
func withDatabase(dsn, name string) (string, error) {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	// In keyword/value form a later keyword overrides an earlier one.
	return dsn + " dbname=" + name, nil
}

// probeAll runs probe on every address at once, within requireTimeout.
func probeAll(tb testing.TB, addrs []string, probe func(context.Context, string) error) error {
	ctx, cancel := context.WithTimeout(tb.Context(), requireTimeout)
	defer cancel()
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { errs[i] = probe(ctx, addr) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	if os.Getenv(EnvSkipIntegration) == "1" {
		tb.Skipf("stack: %s unavailable, skipping (%s=1): %v", what, EnvSkipIntegration, err)
	}
	tb.Fatalf("stack: %s of the local stack does not answer: %v\n"+
		"start the stack with: %s\n(or set %s=1 to skip integration tests)",
		what, err, stack.UpCommand, EnvSkipIntegration)
}

// Silent listens on a loopback port, accepts TCP connections and never
// answers on them: a server that is stopped (SIGSTOP, a long GC pause), a
// postmaster that never finishes its handshake, a proxy with nothing
// behind it. It returns the address; the listener and every connection it
// accepted close when the test ends.
func Silent(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

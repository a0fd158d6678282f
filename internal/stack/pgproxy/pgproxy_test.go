package pgproxy_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/stack/pgproxy"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// testTimeout bounds each test's talk to Postgres.
const testTimeout = 30 * time.Second

type fixture struct {
	proxy  *pgproxy.Proxy
	direct *pgx.Conn // bypasses the proxy: the truth about what committed
	cfg    *pgx.ConnConfig
}

// newFixture makes a private database with a table t(id) on the shared
// stack's Postgres and a proxy in front of the server.
func newFixture(t *testing.T) (*fixture, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	dsn := stacktest.NewDatabase(t, ctx)
	direct, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = direct.Close(context.Background()) })
	if _, err := direct.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	upstream := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	p, err := pgproxy.New(ctx, upstream, pgproxy.WithAckTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("pgproxy.New: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	host, port, _ := net.SplitHostPort(p.Addr())
	portNum, _ := strconv.Atoi(port)
	cfg.Host, cfg.Port = host, uint16(portNum)
	cfg.Fallbacks = nil
	return &fixture{proxy: p, direct: direct, cfg: cfg}, ctx
}

func (f *fixture) connect(t *testing.T, ctx context.Context) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(ctx, f.cfg)
	if err != nil {
		t.Fatalf("connect through proxy: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func (f *fixture) exists(t *testing.T, ctx context.Context, id int) bool {
	t.Helper()
	var n int
	if err := f.direct.QueryRow(ctx, "SELECT count(*) FROM t WHERE id = $1", id).Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n == 1
}

func insertTx(ctx context.Context, c *pgx.Conn, id int) (pgx.Tx, error) {
	tx, err := c.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", id); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

// TestTransactionBoundaries: BEGIN, COMMIT and the statements between
// them are never dropped, in the simple and the extended protocol, nor is
// a stray COMMIT outside a transaction; the first statement that commits by
// itself afterwards is.
func TestTransactionBoundaries(t *testing.T) {
	f, ctx := newFixture(t)
	c := f.connect(t, ctx)
	f.proxy.ArmAutocommit(1, nil)
	// Postgres answers a COMMIT without a transaction with a warning.
	if _, err := c.Exec(ctx, "commit"); err != nil {
		t.Fatalf("stray COMMIT: %v", err)
	}
	for _, sql := range []string{"BEGIN", "INSERT INTO t (id) VALUES (1)", "COMMIT"} {
		if _, err := c.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Close(); err != nil {
			t.Fatalf("extended-protocol %s: %v", sql, err)
		}
	}
	tx, err := insertTx(ctx, c, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit of an explicit transaction: %v", err)
	}
	if d := f.proxy.Dropped(); len(d) != 0 {
		t.Fatalf("Dropped = %+v before any statement outside a transaction", d)
	}
	if _, err := c.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", 3); err == nil {
		t.Fatal("the first autocommitted statement kept its answer")
	}
	if !f.exists(t, ctx, 1) || !f.exists(t, ctx, 2) || !f.exists(t, ctx, 3) {
		t.Fatal("rows 1, 2 and 3 not all committed")
	}
	d := f.proxy.Dropped()
	if len(d) != 1 || !d[0].Committed() || !strings.Contains(d[0].Statement, "VALUES ($1)") {
		t.Fatalf("Dropped = %+v, want the one autocommitted insert", d)
	}
}

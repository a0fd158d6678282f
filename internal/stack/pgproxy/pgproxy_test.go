package pgproxy_test

import (
	"context"
	"errors"
	"net"
	"slices"
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

func TestLostCommitAck(t *testing.T) {
	f, ctx := newFixture(t)
	c := f.connect(t, ctx)

	// Unarmed, commits pass.
	tx, err := insertTx(ctx, c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("unarmed commit: %v", err)
	}

	f.proxy.Arm(1, nil)
	tx, err = insertTx(ctx, c, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("commit with a dropped answer returned no error")
	}
	if !c.IsClosed() {
		t.Error("client connection still open after the dropped commit")
	}
	if !f.exists(t, ctx, 2) {
		t.Fatal("row 2 not committed, although the server got the COMMIT")
	}
	drops := f.proxy.Dropped()
	if len(drops) != 1 || !drops[0].Committed() {
		t.Fatalf("Dropped = %+v, want one committed drop", drops)
	}
	if !slices.ContainsFunc(drops[0].Statements, func(s string) bool { return strings.Contains(s, "INSERT INTO t") }) {
		t.Errorf("drop's statements %q lack the INSERT", drops[0].Statements)
	}
	if got := f.proxy.Armed(); got != 0 {
		t.Errorf("Armed = %d after the drop, want 0", got)
	}
	if got := f.proxy.Commits(); got != 2 {
		t.Errorf("Commits = %d, want 2", got)
	}

	// Disarmed again: a new connection commits normally.
	c2 := f.connect(t, ctx)
	tx, err = insertTx(ctx, c2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after the drop: %v", err)
	}
}

func TestPredicatePicksTransaction(t *testing.T) {
	f, ctx := newFixture(t)
	c := f.connect(t, ctx)
	if _, err := f.direct.Exec(ctx, "CREATE TABLE other (id int)"); err != nil {
		t.Fatal(err)
	}
	f.proxy.Arm(1, func(cm pgproxy.Commit) bool {
		return slices.ContainsFunc(cm.Statements, func(s string) bool { return strings.Contains(s, "INSERT INTO t") })
	})
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO other (id) VALUES ($1)", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit of a transaction the predicate does not pick: %v", err)
	}
	tx, err = insertTx(ctx, c, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("picked commit returned no error")
	}
	if !f.exists(t, ctx, 7) {
		t.Fatal("row 7 not committed")
	}
	if d := f.proxy.Dropped(); len(d) != 1 {
		t.Fatalf("Dropped = %+v, want one", d)
	}
}

// TestExtendedProtocolCommit sends COMMIT as Parse/Bind/Execute/Sync, which
// pgx never does for Tx.Commit but a driver may.
func TestExtendedProtocolCommit(t *testing.T) {
	f, ctx := newFixture(t)
	c := f.connect(t, ctx)
	if _, err := c.Exec(ctx, "begin"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", 9); err != nil {
		t.Fatal(err)
	}
	f.proxy.Arm(1, nil)
	_, err := c.PgConn().ExecParams(ctx, "COMMIT", nil, nil, nil, nil).Close()
	if err == nil {
		t.Fatal("extended-protocol commit with a dropped answer returned no error")
	}
	if !f.exists(t, ctx, 9) {
		t.Fatal("row 9 not committed")
	}
	if d := f.proxy.Dropped(); len(d) != 1 || !d[0].Committed() {
		t.Fatalf("Dropped = %+v, want one committed drop", d)
	}
}

// TestDroppedRollback: a COMMIT of a failed transaction is answered
// ROLLBACK; the drop records that nothing committed.
func TestDroppedRollback(t *testing.T) {
	f, ctx := newFixture(t)
	c := f.connect(t, ctx)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", 11); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", 11); err == nil {
		t.Fatal("duplicate insert succeeded")
	}
	f.proxy.Arm(1, nil)
	if err := tx.Commit(ctx); err == nil || errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("commit = %v, want a connection error (the ROLLBACK answer was dropped)", err)
	}
	if f.exists(t, ctx, 11) {
		t.Fatal("row 11 of the failed transaction exists")
	}
	d := f.proxy.Dropped()
	if len(d) != 1 || d[0].Committed() || d[0].Answer != "ROLLBACK" {
		t.Fatalf("Dropped = %+v, want one drop answered ROLLBACK", d)
	}
}

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
// stack's Postgres and a proxy in front of the server, with opts after an
// ack timeout of 5 s.
func newFixture(t *testing.T, opts ...pgproxy.Option) (*fixture, context.Context) {
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
	p, err := pgproxy.New(ctx, upstream, append([]pgproxy.Option{pgproxy.WithAckTimeout(5 * time.Second)}, opts...)...)
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

// TestDropInsideUnseenTransactionNotCommitted: a transaction opened where
// the statement text does not show it (a BEGIN earlier in the same simple
// Query, a BEGIN behind a comment) is the server's to report, in the
// status byte of its ReadyForQuery. A statement inside it is not dropped
// when the proxy can know in time, and when it cannot (the same Query), its
// dropped answer is not reported committed: the server rolls the open
// transaction back as the proxy cuts the connection.
func TestDropInsideUnseenTransactionNotCommitted(t *testing.T) {
	f, ctx := newFixture(t)
	insert := func(cm pgproxy.Commit) bool { return strings.Contains(cm.Statement, "INSERT INTO t") }
	simple := func(c *pgx.Conn, sql string) error {
		_, err := c.PgConn().Exec(ctx, sql).ReadAll()
		return err
	}

	f.proxy.ArmAutocommit(1, insert)
	if err := simple(f.connect(t, ctx), "BEGIN; INSERT INTO t (id) VALUES (1)"); err == nil {
		t.Fatal("the insert after BEGIN in one Query kept its answer")
	}
	d := f.proxy.Dropped()
	if len(d) != 1 || d[0].Committed() || d[0].TxnStatus != 'T' || d[0].Answer != "INSERT 0 1" {
		t.Fatalf("Dropped = %+v, want one uncommitted drop of the insert, in a transaction", d)
	}
	if f.exists(t, ctx, 1) {
		t.Fatal("row 1 committed: the test's premise (a rolled-back transaction) does not hold")
	}

	c := f.connect(t, ctx)
	f.proxy.ArmAutocommit(1, insert)
	for _, sql := range []string{"/* app=stockguard */ BEGIN", "INSERT INTO t (id) VALUES (2)", "COMMIT"} {
		if err := simple(c, sql); err != nil {
			t.Fatalf("%s inside a transaction opened behind a comment: %v", sql, err)
		}
	}
	if n := len(f.proxy.Dropped()); n != 1 {
		t.Fatalf("%d drops, want none inside the commented BEGIN's transaction", n-1)
	}
	// Once the server says the transaction is over, the next insert
	// commits by itself, and is the one dropped.
	if err := simple(c, "INSERT INTO t (id) VALUES (3)"); err == nil {
		t.Fatal("the autocommitted insert after COMMIT kept its answer")
	}
	if d := f.proxy.Dropped(); len(d) != 2 || !d[1].Committed() || d[1].TxnStatus != 'I' {
		t.Fatalf("Dropped = %+v, want the insert after COMMIT dropped committed", d)
	}
	if !f.exists(t, ctx, 2) || !f.exists(t, ctx, 3) {
		t.Fatal("rows 2 and 3 not both committed")
	}
}

// TestCloseRecordsPendingDrop: a drop still waiting for its answer when
// the proxy closes is recorded, as unknown, before Close returns, and
// nothing is recorded after it (the ack timer is stopped).
func TestCloseRecordsPendingDrop(t *testing.T) {
	const ackTimeout = 1500 * time.Millisecond
	f, ctx := newFixture(t, pgproxy.WithAckTimeout(ackTimeout))
	c := f.connect(t, ctx)
	f.proxy.ArmAutocommit(1, func(cm pgproxy.Commit) bool { return strings.Contains(cm.Statement, "pg_sleep") })
	sent := make(chan error, 1)
	go func() {
		_, err := c.PgConn().Exec(ctx, "SELECT pg_sleep(2)").ReadAll()
		sent <- err
	}()
	// The proxy decides to drop before it forwards: once the server runs
	// the statement, its drop is pending.
	for {
		var n int
		if err := f.direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(2)' AND state = 'active'").Scan(&n); err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if n > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := f.proxy.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	d := f.proxy.Dropped()
	if len(d) != 1 || d[0].Answer != "" || d[0].Committed() {
		t.Fatalf("Dropped after Close = %+v, want the pending drop, unknown", d)
	}
	if err := <-sent; err == nil {
		t.Fatal("the statement whose answer was dropped returned no error")
	}
	time.Sleep(ackTimeout + 200*time.Millisecond)
	if n := len(f.proxy.Dropped()); n != 1 {
		t.Fatalf("%d drops recorded after Close had returned with 1", n)
	}
}

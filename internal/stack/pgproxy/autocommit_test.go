package pgproxy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stockguard/stockguard/internal/stack/pgproxy"
)

// TestLostAutocommitAck: a single statement outside a transaction, as the
// service's write is, commits by itself; ArmAutocommit loses its answer and
// leaves explicit transactions alone.
func TestLostAutocommitAck(t *testing.T) {
	f, ctx := newFixture(t)
	c := f.connect(t, ctx)
	f.proxy.ArmAutocommit(1, func(cm pgproxy.Commit) bool {
		return strings.Contains(cm.Statement, "INSERT INTO t")
	})
	// An explicit transaction and an unmatched statement pass untouched.
	tx, err := insertTx(ctx, c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit of an explicit transaction: %v", err)
	}
	if _, err := c.Exec(ctx, "SELECT count(*) FROM t WHERE id = $1", 1); err != nil {
		t.Fatalf("unmatched statement: %v", err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", 2); err == nil {
		t.Fatal("an autocommitted insert with a dropped answer returned no error")
	}
	if !f.exists(t, ctx, 2) {
		t.Fatal("row 2 not committed")
	}
	d := f.proxy.Dropped()
	if len(d) != 1 || !d[0].Committed() || !strings.Contains(d[0].Statement, "INSERT INTO t") {
		t.Fatalf("Dropped = %+v, want one committed drop of the insert", d)
	}
	// Armed for one: the next matching statement passes.
	c2 := f.connect(t, ctx)
	if _, err := c2.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", 3); err != nil {
		t.Fatalf("insert after the one drop: %v", err)
	}
	// A statement the server refuses is dropped as not committed.
	f.proxy.ArmAutocommit(1, nil)
	if _, err := c2.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", 2); err == nil {
		t.Fatal("a refused insert with a dropped answer returned no error")
	}
	if d := f.proxy.Dropped(); len(d) != 2 || d[1].Committed() || !strings.HasPrefix(d[1].Answer, "error: ") {
		t.Fatalf("drops = %+v, want the second a refused statement", d)
	}
}

// TestRollbackLaterInGroupNotCommitted: a ROLLBACK after the dropped
// statement, in the same Query or Sync group, undoes it, though a statement
// after that leaves no transaction open and answers last; a ROLLBACK
// before it in its group ended an earlier transaction and says nothing of
// it.
func TestRollbackLaterInGroupNotCommitted(t *testing.T) {
	f, ctx := newFixture(t)
	insert := func(cm pgproxy.Commit) bool { return strings.Contains(cm.Statement, "INSERT INTO t") }
	batch := func(sqls ...string) error {
		b := &pgconn.Batch{}
		for _, sql := range sqls {
			b.ExecParams(sql, nil, nil, nil, nil)
		}
		_, err := f.connect(t, ctx).PgConn().ExecBatch(ctx, b).ReadAll()
		return err
	}
	lastDrop := func(n int) pgproxy.Drop {
		t.Helper()
		d := f.proxy.Dropped()
		if len(d) != n {
			t.Fatalf("Dropped = %+v, want %d drops", d, n)
		}
		return d[n-1]
	}

	f.proxy.ArmAutocommit(1, insert)
	if _, err := f.connect(t, ctx).PgConn().Exec(ctx, "INSERT INTO t (id) VALUES (1); ROLLBACK; SELECT 1").ReadAll(); err == nil {
		t.Fatal("Query: the insert's answer was not dropped")
	}
	if d := lastDrop(1); d.Committed() || f.exists(t, ctx, 1) || !slices.Contains(d.Answers, "ROLLBACK") {
		t.Fatalf("Query: drop %+v committed %v, row 1 exists %v; want rolled back, and judged so", d, d.Committed(), f.exists(t, ctx, 1))
	}

	f.proxy.ArmAutocommit(1, insert)
	if err := batch("INSERT INTO t (id) VALUES (2)", "ROLLBACK", "SELECT 1"); err == nil {
		t.Fatal("Sync group: the insert's answer was not dropped")
	}
	if d := lastDrop(2); d.Committed() || f.exists(t, ctx, 2) {
		t.Fatalf("Sync group: drop %+v committed %v, row 2 exists %v; want rolled back, and judged so", d, d.Committed(), f.exists(t, ctx, 2))
	}

	f.proxy.ArmAutocommit(1, insert)
	if err := batch("ROLLBACK", "INSERT INTO t (id) VALUES (3)", "SELECT 1"); err == nil {
		t.Fatal("ROLLBACK first: the insert's answer was not dropped")
	}
	if d := lastDrop(3); !d.Committed() || !f.exists(t, ctx, 3) || !slices.Equal(d.Answers, []string{"INSERT 0 1", "SELECT 1"}) {
		t.Fatalf("ROLLBACK first: drop %+v committed %v, row 3 exists %v; want committed, with the answers from the insert on", d, d.Committed(), f.exists(t, ctx, 3))
	}
}

// TestOneDropPerConnection: two matching Executes in one Sync group make
// one drop, of the first; the second goes upstream with it (the group
// commits as one) and leaves its arming for the next matching statement.
func TestOneDropPerConnection(t *testing.T) {
	f, ctx := newFixture(t)
	f.proxy.ArmAutocommit(2, func(cm pgproxy.Commit) bool { return strings.Contains(cm.Statement, "INSERT INTO t") })
	b := &pgconn.Batch{}
	b.ExecParams("INSERT INTO t (id) VALUES (1)", nil, nil, nil, nil)
	b.ExecParams("INSERT INTO t (id) VALUES (2)", nil, nil, nil, nil)
	if _, err := f.connect(t, ctx).PgConn().ExecBatch(ctx, b).ReadAll(); err == nil {
		t.Fatal("the group's answers were not dropped")
	}
	d := f.proxy.Dropped()
	if len(d) != 1 || !strings.Contains(d[0].Statement, "(1)") || !d[0].Committed() || len(d[0].Answers) != 2 {
		t.Fatalf("Dropped = %+v, want one committed drop of the first insert, with both answers", d)
	}
	if !f.exists(t, ctx, 1) || !f.exists(t, ctx, 2) {
		t.Fatal("rows 1 and 2 not both committed")
	}
	if _, err := f.connect(t, ctx).Exec(ctx, "INSERT INTO t (id) VALUES (3)"); err == nil {
		t.Fatal("the second arming was spent: the next insert kept its answer")
	}
	if d := f.proxy.Dropped(); len(d) != 2 || !strings.Contains(d[1].Statement, "VALUES (3)") {
		t.Fatalf("Dropped = %+v, want the next insert dropped", d)
	}
}

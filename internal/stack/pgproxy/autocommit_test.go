package pgproxy_test

import (
	"strings"
	"testing"

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

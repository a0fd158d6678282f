package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// TestClaimProbesTheIndex: a batch's claim of a few SKUs among a thousand
// reaches its rows through the primary key, not a scan of the table (the
// plan the server's default random_page_cost gives it).
func TestClaimProbesTheIndex(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO skus (sku) SELECT 'plan-' || g FROM generate_series(1, 1000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `ANALYZE skus`); err != nil {
		t.Fatal(err)
	}
	skus := make([]string, 10)
	for i := range skus {
		skus[i] = fmt.Sprintf("plan-%d", 1+97*i)
	}
	text := explain(t, s.DB().QueryContext, "EXPLAIN "+postgres.ClaimSQL,
		"{"+strings.Join(skus, ",")+"}", "{1,1,1,1,1,1,1,1,1,1}",
		"{"+strings.Repeat("00000000-0000-0000-0000-000000000001,", 9)+"00000000-0000-0000-0000-000000000001}")
	if strings.Contains(text, "Seq Scan on skus") || !strings.Contains(text, "skus_pkey") {
		t.Fatalf("the claim of 10 of 1,000 SKUs scans the table:\n%s", text)
	}
}

// TestSessionRandomPageCost: the store sets random_page_cost on its
// connections unless the URL sets it, as a parameter or in its options.
func TestSessionRandomPageCost(t *testing.T) {
	ctx := context.Background()
	url := stacktest.NewDatabase(t, ctx)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, c := range []struct{ url, want string }{
		{url, "1.1"},
		{url + sep + "random_page_cost=3", "3"},
		{url + sep + "options=-c%20random_page_cost%3D2", "2"},
	} {
		s, err := postgres.Open(ctx, c.url)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = s.DB().QueryRowContext(ctx, `SHOW random_page_cost`).Scan(&got)
		_ = s.Close()
		if err != nil || got != c.want {
			t.Errorf("%s: random_page_cost %q, %v; want %s", c.url, got, err, c.want)
		}
	}
	// A value the server refuses fails Open, promptly and by name, rather
	// than a pool that cannot connect.
	for _, v := range []string{"abc", "-1", strings.Repeat("9", 4096)} {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := postgres.Open(ctx, url+sep+"random_page_cost="+v)
		cancel()
		if err == nil {
			_ = s.Close()
			t.Errorf("random_page_cost=%.10s: Open succeeded", v)
			continue
		}
		if !strings.Contains(err.Error(), "random_page_cost") {
			t.Errorf("random_page_cost=%.10s: %v; want the parameter named", v, err)
		}
	}
}

// TestHotStatementsRunGenericPlans: the claim and the write run on their
// generic plans, never planned again per execution, and the setting that
// asks for it ends with each statement's transaction: the connection's
// other statements keep the server's own choice.
func TestHotStatementsRunGenericPlans(t *testing.T) {
	// One connection: every statement below runs in the same session.
	s := newStore(t, postgres.WithMaxConns(1))
	ctx := t.Context()
	f := mustStock(t, s, "sku-generic", 100, 1)
	for range 7 { // past the five custom plans the server tries first
		if err := reserve(ctx, s, f, 1); err != nil {
			t.Fatalf("reserve: %v", err)
		}
	}
	for name, sql := range map[string]string{"claim": postgres.ClaimSQL, "write": postgres.WriteSQL} {
		var generic, custom int64
		err := s.DB().QueryRowContext(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, sql).
			Scan(&generic, &custom)
		if err != nil {
			t.Fatalf("%s: pg_prepared_statements: %v", name, err)
		}
		// mustStock's claim and write count too.
		if generic < 8 || custom != 0 {
			t.Errorf("%s: %d generic and %d custom plans, want 8 or more generic and no custom", name, generic, custom)
		}
	}
	var mode string
	if err := s.DB().QueryRowContext(ctx, `SHOW plan_cache_mode`).Scan(&mode); err != nil || mode != "auto" {
		t.Fatalf("plan_cache_mode after the hot statements = %q, %v; want auto (the setting leaked)", mode, err)
	}
}

// TestGenericPlansProbeTheIndex: the generic plans of the claim and the
// write, which know nothing of their arrays, still reach a few SKUs among a
// thousand, and orders among many, through the primary keys.
func TestGenericPlansProbeTheIndex(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	for _, q := range []string{
		`INSERT INTO skus (sku) SELECT 'plan-' || g FROM generate_series(1, 1000) g`,
		`INSERT INTO orders (id, request_hash, status, expires_at)
			SELECT gen_random_uuid(), 'h', 'reserved', now() FROM generate_series(1, 1000)`,
		`ANALYZE skus`, `ANALYZE orders`,
	} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.DB().Conn(ctx) // PREPARE, SET and EXPLAIN EXECUTE share a session
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	id := "'00000000-0000-0000-0000-000000000001'"
	for name, c2 := range map[string]struct{ sql, args string }{
		"claim": {postgres.ClaimSQL, `'{plan-1,plan-98}', '{1,1}', '{` + strings.Trim(id, "'") + `,` + strings.Trim(id, "'") + `}'`},
		"write": {postgres.WriteSQL, `'{` + strings.Trim(id, "'") + `}', '{reserved}', '{confirmed}',
			'{plan-1}', '{1}', '{0}', '{0}', '{1}', '{1}', '{` + strings.Trim(id, "'") + `}', 1,
			'{}', '{}', '{}', '{}', '{}', '{}',
			'{}', '{}', '{}', '{}', '{}',
			1, 1, 0`},
	} {
		if _, err := c.ExecContext(ctx, "PREPARE "+name+" AS "+c2.sql); err != nil {
			t.Fatalf("prepare %s: %v", name, err)
		}
		text := explain(t, c.QueryContext, "EXPLAIN EXECUTE "+name+"("+c2.args+")")
		var generic int64
		if err := c.QueryRowContext(ctx, `SELECT generic_plans FROM pg_prepared_statements WHERE name = $1`, name).Scan(&generic); err != nil || generic == 0 {
			t.Fatalf("%s: %d generic plans, %v: EXPLAIN did not show the generic plan", name, generic, err)
		}
		if strings.Contains(text, "Seq Scan on skus") || strings.Contains(text, "Seq Scan on orders") || !strings.Contains(text, "skus_pkey") {
			t.Fatalf("%s: the generic plan scans a table:\n%s", name, text)
		}
		if name == "write" && !strings.Contains(text, "orders_pkey") {
			t.Fatalf("write: the generic plan does not find the orders it moves by key:\n%s", text)
		}
	}
}

// explain runs an EXPLAIN through query and returns its plan as text.
func explain(t *testing.T, query func(context.Context, string, ...any) (*sql.Rows, error), q string, args ...any) string {
	t.Helper()
	rows, err := query(t.Context(), q, args...)
	if err != nil {
		t.Fatalf("%.40s: %v", q, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

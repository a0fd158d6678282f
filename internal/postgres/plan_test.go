package postgres_test

import (
	"context"
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
	rows, err := s.DB().QueryContext(ctx, "EXPLAIN "+postgres.ClaimSQL,
		"{"+strings.Join(skus, ",")+"}", "{1,1,1,1,1,1,1,1,1,1}",
		"{"+strings.Repeat("00000000-0000-0000-0000-000000000001,", 9)+"00000000-0000-0000-0000-000000000001}")
	if err != nil {
		t.Fatal(err)
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
	text := strings.Join(plan, "\n")
	if strings.Contains(text, "Seq Scan on skus") || !strings.Contains(text, "skus_pkey") {
		t.Fatalf("the claim of 10 of 1,000 SKUs scans the table:\n%s", text)
	}
}

// TestSessionRandomPageCost: the store sets random_page_cost on its
// connections unless the URL sets it.
func TestSessionRandomPageCost(t *testing.T) {
	ctx := context.Background()
	url := stacktest.NewDatabase(t, ctx)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, c := range []struct{ url, want string }{{url, "1.1"}, {url + sep + "random_page_cost=3", "3"}} {
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

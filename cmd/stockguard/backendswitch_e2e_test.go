package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// TestSwitchingTheLockBackendNeedsResetFences: token spaces of different
// backends are not comparable. Rows fenced by ZooKeeper's czxids (tens of
// billions) refuse every lease of Redlock, whose counters start at 1: each
// write answers 409 stale_fence (never an oversell), and the log names the
// row's token and the lease's. migrate --reset-fences refuses to run
// without --yes; with it, the new backend writes, and the order lines keep
// the tokens they were placed under.
func TestSwitchingTheLockBackendNeedsResetFences(t *testing.T) {
	ctx := context.Background()
	env := backendEnv(t)
	dbURL := strings.TrimPrefix(env[0], "STOCKGUARD_DATABASE_URL=")
	sku := fmt.Sprintf("switch-%d", time.Now().UnixNano())
	order := `{"lines":[{"sku":"` + sku + `","quantity":1}]}`

	zk := startInstance(t, env, "--lock=zookeeper")
	if st, body := call(t, "PUT", zk.url+"/v1/skus/"+sku, `{"available":10}`); st != 200 {
		t.Fatalf("PUT on zookeeper: %d %v", st, body)
	}
	st, placed := call(t, "POST", zk.url+"/v1/orders", order)
	if st != 201 {
		t.Fatalf("order on zookeeper: %d %v", st, placed)
	}
	_, k := call(t, "GET", zk.url+"/v1/skus/"+sku, "")
	rowFence, _ := k["fence_token"].(float64)
	zk.sigterm(t, 15*time.Second)

	rl := startInstance(t, env, "--lock=redlock")
	st, body := call(t, "POST", rl.url+"/v1/orders", order)
	if e, _ := body["error"].(map[string]any); st != 409 || e["code"] != "stale_fence" {
		t.Fatalf("order on redlock over zookeeper's fences: %d %v, want 409 stale_fence", st, body)
	}
	if want := fmt.Sprintf("row fence %d, lease token ", int64(rowFence)); !strings.Contains(rl.log(), want) {
		t.Errorf("the refusal's log does not name both tokens (%q):\n%s", want, rl.log())
	}
	rl.sigterm(t, 15*time.Second)

	var out, errOut strings.Builder
	noEnv := func(string) string { return "" }
	err := run(ctx, []string{"migrate", "--reset-fences", "--database-url", dbURL}, noEnv, &out, &errOut)
	if exitCode(err) != exitUsage || !strings.Contains(errOut.String(), "--yes") {
		t.Fatalf("migrate --reset-fences without --yes = %v (exit %d), stderr %q; want exit 2 asking for --yes", err, exitCode(err), errOut.String())
	}
	if got := rowFenceOf(t, dbURL, sku); got != int64(rowFence) {
		t.Fatalf("fence after the refused reset = %d, want %d untouched", got, int64(rowFence))
	}
	out.Reset()
	if err := run(ctx, []string{"migrate", "--reset-fences", "--yes", "--database-url", dbURL}, noEnv, &out, &errOut); err != nil {
		t.Fatalf("migrate --reset-fences --yes: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "reset the fence token of 1 SKU row(s)") {
		t.Errorf("migrate --reset-fences --yes printed %q, want the one row it reset", out.String())
	}

	rl = startInstance(t, env, "--lock=redlock")
	if st, body := call(t, "POST", rl.url+"/v1/orders", order); st != 201 {
		t.Errorf("order on redlock after the reset: %d %v", st, body)
	}
	if st, body := call(t, "PUT", rl.url+"/v1/skus/"+sku, `{"available":20}`); st != 200 {
		t.Errorf("PUT on redlock after the reset: %d %v", st, body)
	}
	if _, a := call(t, "GET", rl.url+"/v1/skus/"+sku+"/audit", ""); a["consistent"] != true || a["held"] != float64(2) {
		t.Errorf("audit after the switch: %v, want consistent with the 2 held units", a)
	}
	_, first := call(t, "GET", rl.url+"/v1/orders/"+placed["order_id"].(string), "")
	if lines, _ := first["lines"].([]any); len(lines) != 1 || lines[0].(map[string]any)["fence_token"] != rowFence {
		t.Errorf("zookeeper's order after the reset: %v, want its line's token %d kept", first, int64(rowFence))
	}
}

// rowFenceOf reads sku's fence token from the database at dbURL.
func rowFenceOf(t *testing.T, dbURL, sku string) int64 {
	t.Helper()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var token int64
	if err := db.QueryRowContext(t.Context(), `SELECT fence_token FROM skus WHERE sku = $1`, sku).Scan(&token); err != nil {
		t.Fatal(err)
	}
	return token
}

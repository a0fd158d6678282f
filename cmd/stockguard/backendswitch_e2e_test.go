package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
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
	if want := fmt.Sprintf("row fence %d, lease token ", int64(rowFence)); !rl.waitLog(want, 5*time.Second) {
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

// TestResetFencesWithAReplicaStillRunning: a replica left running, here on
// the old backend and serving orders, fences rows again right after
// migrate --reset-fences, which undoes the switch: migrate says so and
// exits 1 instead of reporting a reset that no longer holds. A row a
// session keeps locked makes the reset give up at its lock timeout, with
// the hint that a replica may hold it.
func TestResetFencesWithAReplicaStillRunning(t *testing.T) {
	ctx := context.Background()
	env := backendEnv(t)
	dbURL := strings.TrimPrefix(env[0], "STOCKGUARD_DATABASE_URL=")
	noEnv := func(string) string { return "" }
	const skus = 4
	zk := startInstance(t, env, "--lock=zookeeper")
	for i := range skus {
		if st, body := call(t, "PUT", fmt.Sprintf("%s/v1/skus/live-%d", zk.url, i), `{"available":100000}`); st != 200 {
			t.Fatalf("PUT: %d %v", st, body)
		}
	}
	ordering, stopOrdering := context.WithCancel(ctx)
	ordered := make(chan struct{})
	go func() {
		defer close(ordered)
		for i := 0; ordering.Err() == nil; i++ {
			call(t, "POST", zk.url+"/v1/orders", fmt.Sprintf(`{"lines":[{"sku":"live-%d","quantity":1}]}`, i%skus))
		}
	}()
	var out, errOut strings.Builder
	err := run(ctx, []string{"migrate", "--reset-fences", "--yes", "--database-url", dbURL}, noEnv, &out, &errOut)
	stopOrdering()
	<-ordered
	if exitCode(err) != exitFailure || !strings.Contains(fmt.Sprint(err), "SKU row(s) carry a fence token again") ||
		!strings.Contains(fmt.Sprint(err), "a replica is still running") || strings.Contains(out.String(), "start the replicas") {
		t.Errorf("migrate --reset-fences --yes with a replica still serving = %v (exit %d), stdout %q; "+
			"want exit 1 saying the rows were fenced again by a replica still running", err, exitCode(err), out.String())
	}
	zk.sigterm(t, 15*time.Second)

	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A fenced row (the reset skips one at 0 without waiting for its lock),
	// locked by a session that does not let go.
	if _, err := db.ExecContext(ctx, `UPDATE skus SET fence_token = 42 WHERE sku = 'live-0'`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM skus WHERE sku = 'live-0' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = run(ctx, []string{"migrate", "--reset-fences", "--yes", "--database-url", dbURL}, noEnv, &out, &errOut)
	if exitCode(err) != exitFailure || !strings.Contains(fmt.Sprint(err), "lock timeout") ||
		!strings.Contains(fmt.Sprint(err), "a replica still running may hold it") {
		t.Errorf("migrate --reset-fences --yes behind a row locked in an open transaction = %v (exit %d); "+
			"want exit 1 on the lock timeout, saying that a replica may hold the row", err, exitCode(err))
	}
}

// TestResetFencesIsConfirmedOnTheCommandLine: STOCKGUARD_RESET_FENCES and
// STOCKGUARD_YES are not read, since a confirmation left in an environment
// would confirm every later run, and migrate says so rather than ignore
// them in silence. --yes alone confirms nothing: a usage error.
func TestResetFencesIsConfirmedOnTheCommandLine(t *testing.T) {
	ctx := context.Background()
	dbURL := stacktest.NewDatabase(t, ctx)
	var out, errOut strings.Builder
	if err := run(ctx, []string{"migrate", "--database-url", dbURL}, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("migrate: %v\n%s", err, errOut.String())
	}
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `INSERT INTO skus (sku, fence_token) VALUES ('fenced', 42)`); err != nil {
		t.Fatal(err)
	}
	confirmingEnv := func(name string) string {
		return map[string]string{"STOCKGUARD_RESET_FENCES": "true", "STOCKGUARD_YES": "true"}[name]
	}
	out.Reset()
	errOut.Reset()
	if err := run(ctx, []string{"migrate", "--database-url", dbURL}, confirmingEnv, &out, &errOut); err != nil {
		t.Fatalf("migrate with the variables set: %v\n%s", err, errOut.String())
	}
	for _, v := range []string{"STOCKGUARD_RESET_FENCES is ignored", "STOCKGUARD_YES is ignored"} {
		if !strings.Contains(errOut.String(), v) {
			t.Errorf("stderr of migrate with the variables set does not say %q: %q", v, errOut.String())
		}
	}
	if got := rowFenceOf(t, dbURL, "fenced"); got != 42 || strings.Contains(out.String(), "reset the fence token") {
		t.Errorf("migrate with the variables set reset the fences: row fence %d, stdout %q", got, out.String())
	}

	errOut.Reset()
	err = run(ctx, []string{"migrate", "--yes", "--database-url", dbURL}, func(string) string { return "" }, &out, &errOut)
	if exitCode(err) != exitUsage || !strings.Contains(errOut.String(), "--reset-fences") {
		t.Errorf("migrate --yes alone = %v (exit %d), stderr %q; want exit 2 naming --reset-fences", err, exitCode(err), errOut.String())
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

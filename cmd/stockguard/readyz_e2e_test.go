package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// closedAddrs returns n loopback addresses nothing listens on.
func closedAddrs(t *testing.T, n int) string {
	t.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	return strings.Join(addrs, ",")
}

func metricLine(t *testing.T, url, prefix string) string {
	t.Helper()
	res, err := client.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestLockOutageDoesNotCascade: an instance whose lock servers are all
// unreachable stays ready (its database is fine), says so in /readyz's body
// and in stockguard_lock_backend_up, keeps answering reads and answers
// writes 503 lock_unavailable.
func TestLockOutageDoesNotCascade(t *testing.T) {
	env := backendEnv(t)
	healthy := startInstance(t, env, "--lock=redlock")
	if st, body := call(t, "PUT", healthy.url+"/v1/skus/outage-1", `{"available":5}`); st != 200 {
		t.Fatalf("PUT through the healthy instance: %d %v", st, body)
	}
	st, body := call(t, "GET", healthy.url+"/readyz", "")
	if lock, _ := body["lock"].(map[string]any); st != 200 || lock["healthy"] != true || lock["backend"] != "redlock" {
		t.Fatalf("healthy /readyz: %d %v", st, body)
	}

	down := startInstance(t, env, "--lock=redlock", "--redis-addrs="+closedAddrs(t, 5), "--lock-wait=500ms")
	st, body = call(t, "GET", down.url+"/readyz", "")
	lock, _ := body["lock"].(map[string]any)
	if st != 200 || body["status"] != "ready" || lock["healthy"] != false || lock["backend"] != "redlock" || lock["error"] == "" {
		t.Fatalf("/readyz with the lock servers down: %d %v, want 200 ready with lock.healthy false", st, body)
	}
	// /readyz answers anyone: the reason, not the error naming every node.
	if lock["error"] != "lock: backend unavailable" {
		t.Errorf("/readyz's lock.error = %q, want %q (the nodes' addresses and dial errors are for the log)", lock["error"], "lock: backend unavailable")
	}
	if l := metricLine(t, down.url, "stockguard_lock_backend_up{"); l != `stockguard_lock_backend_up{backend="redlock"} 0` {
		t.Errorf("metric: %q", l)
	}
	if l := metricLine(t, healthy.url, "stockguard_lock_backend_up{"); l != `stockguard_lock_backend_up{backend="redlock"} 1` {
		t.Errorf("healthy metric: %q", l)
	}
	// Reads answer from the database.
	if st, body := call(t, "GET", down.url+"/v1/skus/outage-1", ""); st != 200 || body["available"] != float64(5) {
		t.Errorf("GET SKU: %d %v", st, body)
	}
	if st, body := call(t, "GET", down.url+"/v1/skus/outage-1/audit", ""); st != 200 || body["consistent"] != true {
		t.Errorf("GET audit: %d %v", st, body)
	}
	// Writes need the lock.
	for _, w := range [][3]string{
		{"POST", "/v1/orders", `{"lines":[{"sku":"outage-1","quantity":1}]}`},
		{"PUT", "/v1/skus/outage-1", `{"available":9}`},
	} {
		st, body := call(t, w[0], down.url+w[1], w[2])
		e, _ := body["error"].(map[string]any)
		if st != http.StatusServiceUnavailable || e["code"] != "lock_unavailable" {
			t.Errorf("%s %s with the lock servers down: %d %v, want 503 lock_unavailable", w[0], w[1], st, body)
		}
	}
}

// TestNotReadyWithoutMigrations: --migrate=false on an empty database is
// not ready (503 not_ready) until the schema is migrated.
func TestNotReadyWithoutMigrations(t *testing.T) {
	dbURL := stacktest.NewDatabase(t, context.Background())
	in := startInstance(t, []string{"STOCKGUARD_DATABASE_URL=" + dbURL, "STOCKGUARD_LOG_LEVEL=warn"}, "--lock=local", "--migrate=false")
	st, body := call(t, "GET", in.url+"/readyz", "")
	if e, _ := body["error"].(map[string]any); st != 503 || e["code"] != "not_ready" {
		t.Fatalf("/readyz before migrations: %d %v, want 503 not_ready", st, body)
	}
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"migrate", "--database-url", dbURL}, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("migrate: %v\n%s", err, errOut.String())
	}
	if st, body := call(t, "GET", in.url+"/readyz", ""); st != 200 || body["status"] != "ready" {
		t.Fatalf("/readyz after migrate: %d %v", st, body)
	}
}

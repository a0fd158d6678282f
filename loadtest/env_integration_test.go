package loadtest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
	"github.com/stockguard/stockguard/loadtest/procs"
)

// TestStrayEnvironmentDoesNotReachInstances starts the real service the way
// compare, bench and chaos do, with STOCKGUARD_COALESCE=off and
// STOCKGUARD_LOCK=none left in the caller's environment: the instance must
// run what its options say, as its stockguard_build_info shows.
func TestStrayEnvironmentDoesNotReachInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test; -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := stacktest.NewDatabase(t, ctx)
	bin := buildStockguard(t)
	t.Setenv("STOCKGUARD_COALESCE", "off")
	t.Setenv("STOCKGUARD_LOCK", "none")
	ins, err := procs.Start(ctx, procs.ServeOptions{Bin: bin, Lock: "postgres", Fencing: "on", AdminToken: "tok",
		DatabaseURL: dsn, LogDir: t.TempDir()}, 1, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := procs.StopAll(ins); err != nil {
			t.Error(err)
		}
	}()
	res, err := http.Get(ins[0].URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var info string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "stockguard_build_info{") {
			info = l
		}
	}
	if !strings.Contains(info, `coalesce="on"`) || !strings.Contains(info, `backend="postgres"`) {
		t.Errorf("build info %q: the caller's STOCKGUARD_* changed the instance", info)
	}
	// The admin token came through the explicit environment.
	req, _ := http.NewRequestWithContext(ctx, "PUT", ins[0].URL+"/v1/skus/env-1", strings.NewReader(`{"available":1}`))
	req.Header.Set("Content-Type", "application/json")
	put, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	put.Body.Close()
	if put.StatusCode != http.StatusUnauthorized {
		t.Errorf("PUT without the token: %s, want 401", put.Status)
	}
}

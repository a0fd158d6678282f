package chaos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/loadtest/procs"
)

// TestChaosLogRootKeptOnlyWithLogs: a temporary log root asked to be kept
// (a run failed) stays only when it holds a log; an interrupted Execute
// that made no run leaves no directory behind.
func TestChaosLogRootKeptOnlyWithLogs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var stderr strings.Builder

	root, cleanup, err := procs.LogRoot("", "stockguard-chaos-", &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "pause-holder_redis_fencing-on"), 0o755); err != nil {
		t.Fatal(err)
	}
	if cleanup(true) {
		t.Error("a root holding only an empty run directory was kept")
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there (stat: %v)", root, err)
	}

	root, cleanup, err = procs.LogRoot("", "stockguard-chaos-", &stderr)
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(root, "pause-holder_redis_fencing-on")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "instance-1.log"), []byte("listening\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !cleanup(true) || !strings.Contains(stderr.String(), "logs kept in "+root) {
		t.Errorf("a failed run's logs were not kept (stderr %q)", stderr.String())
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}

	cc := DefaultConfig()
	cc.Scenarios, cc.Backends, cc.Fencing = []string{"pause-holder"}, []string{"redis"}, []string{"on"}
	cc.Bin = "/bin/true"
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res, err := Execute(ctx, cc, &stderr)
	if err == nil || res == nil || len(res.Runs) != 0 {
		t.Fatalf("Execute with a cancelled context: %v, %+v; want interrupted before any run", err, res)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("an Execute interrupted before any run left %v in %s", left, tmp)
	}
}

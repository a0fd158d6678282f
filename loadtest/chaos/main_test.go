package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/netns"
)

// TestMain first sweeps what an interrupted earlier run of these tests
// left (a timeout's panic or a kill runs no clean-up): the namespaces, with
// their veths and nftables tables, and the scratch directories of owners
// that no longer run. It removes the stockguard binary the chaos tests
// share once they are done, and fails the run if any of them left a
// network namespace behind: they run in parallel, so only once all are
// done is every namespace still owned by this process a leak. With
// envPdeathParent set the binary is a helper of
// TestAsPostgresDiesWithParent instead.
func TestMain(m *testing.M) {
	if os.Getenv(envPdeathParent) != "" {
		if err := pdeathParent(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Geteuid() == 0 { // only root makes namespaces
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if removed, err := netns.Sweep(ctx, netPrefix); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: sweep:", err)
		} else if len(removed) > 0 {
			fmt.Fprintln(os.Stderr, "chaos: swept what an interrupted run left:", removed)
		}
		cancel()
	}
	code := m.Run()
	if chaosBin.dir != "" {
		_ = os.RemoveAll(chaosBin.dir)
	}
	left, err := ownNamespaces()
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		code = 1
	case len(left) > 0:
		fmt.Fprintf(os.Stderr, "FAIL: network namespaces left behind: %v\n", left)
		code = 1
	}
	os.Exit(code)
}

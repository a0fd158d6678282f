package chaos

import (
	"fmt"
	"os"
	"testing"
)

// TestMain removes the stockguard binary the chaos tests share once they
// are done, and fails the run if any of them left a network namespace
// behind: they run in parallel, so only once all are done is every
// namespace still owned by this process a leak. With envPdeathParent set
// the binary is a helper of TestAsPostgresDiesWithParent instead.
func TestMain(m *testing.M) {
	if os.Getenv(envPdeathParent) != "" {
		if err := pdeathParent(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
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

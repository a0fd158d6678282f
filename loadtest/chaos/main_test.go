package chaos

import (
	"fmt"
	"os"
	"testing"
)

// TestMain removes the stockguard binary the chaos tests share once they
// are done, and fails the run if any of them left a network namespace
// behind: they run in parallel, so only once all are done is every
// namespace still owned by this process a leak.
func TestMain(m *testing.M) {
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

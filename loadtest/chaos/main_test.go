package chaos

import (
	"os"
	"testing"
)

// TestMain removes the stockguard binary the chaos tests share once they
// are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if chaosBin.dir != "" {
		_ = os.RemoveAll(chaosBin.dir)
	}
	os.Exit(code)
}

package stack_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestScriptRefusesBadSettings runs scripts/stack.sh with hostile values in
// the variables it passes on to the servers: each is refused, with the value
// named, before the script touches anything.
func TestScriptRefusesBadSettings(t *testing.T) {
	for _, c := range []struct{ name, env, value, want string }{
		{"port not a number", "STOCKGUARD_STACK_ZK_PORTS", "2181,x,2183", "bad port"},
		{"port out of range", "STOCKGUARD_STACK_REDIS_PORTS", "6391,70000", "bad port"},
		{"interval not a number", "STOCKGUARD_STACK_ZK_CONTAINER_CHECK_MS", "abc", "bad ZooKeeper container interval"},
		{"interval carrying a JVM flag", "STOCKGUARD_STACK_ZK_CONTAINER_CHECK_MS", "1000 -Dzookeeper.skipACL=yes", "bad ZooKeeper container interval"},
		{"interval below a second", "STOCKGUARD_STACK_ZK_CONTAINER_NEVER_USED_MS", "10", "bad ZooKeeper container interval"},
		{"interval of 64 KB", "STOCKGUARD_STACK_ZK_CONTAINER_CHECK_MS", strings.Repeat("9", 64<<10), "bad ZooKeeper container interval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "../../scripts/stack.sh", "status")
			cmd.Env = append(os.Environ(), c.env+"="+c.value)
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("exit: %v, want 1; output:\n%s", err, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("output lacks %q:\n%s", c.want, out)
			}
		})
	}
}

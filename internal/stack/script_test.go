package stack_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
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

// runScript runs scripts/stack.sh with args and extra variables and
// returns its exit status and output; a run as another user goes through
// runuser.
func runScript(t *testing.T, script string, env []string, asUser string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name, argv := "bash", append([]string{script}, args...)
	if asUser != "" {
		name, argv = "runuser", append([]string{"-u", asUser, "--", "bash"}, argv...)
	}
	cmd := exec.CommandContext(ctx, name, argv...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("stack.sh %v: %v\n%s", args, err, out.String())
	return -1, ""
}

// TestScriptClaimsOnlyItsOwnDir: `up` refuses a STOCKGUARD_STACK_DIR that
// is neither new, empty nor marked as the stack's (such as /tmp) before it
// changes anything in it, and `down --purge` leaves such a directory alone.
// Both stop before any server is looked for, so the running stack is not
// touched.
func TestScriptClaimsOnlyItsOwnDir(t *testing.T) {
	const script = "../../scripts/stack.sh"
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "keep"), []byte("not the stack's"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory where the script's lock file would go: a script that
	// claimed the directory anyway dies at its lock, before it starts any
	// server on the shared stack's ports.
	if err := os.Mkdir(filepath.Join(foreign, ".lock"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Like /tmp: world-writable with the sticky bit.
	if err := os.Chmod(foreign, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir, want string
		args            []string
	}{
		{"up in a foreign dir", foreign, "not a stack directory", []string{"up"}},
		{"down in a foreign dir", foreign, "not a stack directory", []string{"down"}},
		{"purge of a foreign dir", foreign, "not a stack directory", []string{"down", "--purge"}},
		{"up on a file", file, "is not a directory", []string{"up"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := runScript(t, script, []string{"STOCKGUARD_STACK_DIR=" + c.dir}, "", c.args...)
			if code != 1 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, want 1 with %q; output:\n%s", code, c.want, out)
			}
		})
	}
	fi, err := os.Stat(foreign)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&(os.ModeSticky|os.ModePerm) != os.ModeSticky|0o777 {
		t.Errorf("the foreign dir's mode is now %v, want drwxrwxrwt", fi.Mode())
	}
	entries, err := os.ReadDir(foreign)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("the foreign dir holds %v, want only .lock and keep", entries)
	}
}

// TestScriptAsAnotherUser: a user other than root sees the stack root
// started as root does (postgres' pidfile is in a directory only postgres
// may enter), re-uses it with `up`, and is told to run as root where root is
// needed.
func TestScriptAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the script as another user")
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	stacktest.RequireRedis(t)
	stacktest.RequireZK(t)
	stacktest.RequireEtcd(t)
	stacktest.RequirePostgres(t)
	dir, script := othersCopy(t)

	rootCode, rootOut := runScript(t, script, nil, "", "status")
	code, out := runScript(t, script, nil, "nobody", "status")
	if code != rootCode || out != rootOut {
		t.Fatalf("status as nobody: exit %d\n%s\nas root: exit %d\n%s", code, out, rootCode, rootOut)
	}
	if rootCode != 0 {
		t.Skipf("the running stack is not all up by stack.sh's status:\n%s", rootOut)
	}
	if code, out := runScript(t, script, nil, "nobody", "up"); code != 0 || !strings.Contains(out, "export "+stack.EnvDatabaseURL+"=") {
		t.Fatalf("up as nobody with the stack running: exit %d\n%s", code, out)
	}
	fresh := filepath.Join(dir, "stack")
	code, out = runScript(t, script, []string{"STOCKGUARD_STACK_DIR=" + fresh}, "nobody", "up")
	if code != 1 || !strings.Contains(out, "needs root: run as root") {
		t.Fatalf("up as nobody in a new dir: exit %d, want 1 with a run-as-root message\n%s", code, out)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("up as nobody created %s (stat: %v)", fresh, err)
	}
}

// TestScriptFindsPostmasterAsAnotherUser: a user who may not read the
// postmaster's pidfile finds the postmaster by its command line, and a
// process it has just forked (a backend bears the postmaster's command line
// until it sets its title) is not taken for it, wherever its PID sorts. The
// postmaster here is a copy of bash named postgres, with two forked
// subshells; the real cluster answers pg_isready on its port.
func TestScriptFindsPostmasterAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the script as another user")
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	u, err := url.Parse(stacktest.RequirePostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	dir, script := othersCopy(t)
	// The stack's pg/ is closed to other users, as postgres leaves it.
	if err := os.Mkdir(filepath.Join(dir, "pg"), 0o700); err != nil {
		t.Fatal(err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(bash)
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "postgres")
	if err := os.WriteFile(fake, body, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Each subshell stays a fork of the fake postmaster (comm postgres, same
	// command line); only its sleeps exec.
	// Bounded (a minute): a subshell outlives its parent's SIGKILL.
	loop := "(n=0; while [ $n -lt 300 ]; do sleep 0.2; n=$((n+1)); done) &"
	pm := exec.CommandContext(ctx, fake, "-c", loop+" "+loop+" wait", "postgres", "-D", filepath.Join(dir, "pg", "data"))
	// Pdeathsig: a test binary killed before its cleanups leaves no endless
	// loop behind.
	pm.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := pm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The subshells die with their parent's process group.
		_ = syscall.Kill(-pm.Process.Pid, syscall.SIGKILL)
		_ = pm.Wait()
	})
	waitChildren(t, pm.Process.Pid, 2)

	env := []string{"STOCKGUARD_STACK_DIR=" + dir, "STOCKGUARD_STACK_PG_PORT=" + u.Port()}
	want := "postgres  127.0.0.1:" + u.Port() + " up (pid " + strconv.Itoa(pm.Process.Pid) + ")"
	_, out := runScript(t, script, env, "nobody", "status")
	if !strings.Contains(out, want) {
		t.Fatalf("status as nobody lacks %q:\n%s", want, out)
	}
}

// waitChildren waits until pid has n children.
func waitChildren(t *testing.T, pid, n int) {
	t.Helper()
	path := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children"
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(strings.Fields(string(b))) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d has children %q (%v), want %d", pid, b, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// othersCopy copies scripts/stack.sh into a new directory that another
// user can read (the work tree may be under /root) and returns both.
func othersCopy(t *testing.T) (dir, script string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "stack-script-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../../scripts/stack.sh")
	if err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(dir, "stack.sh")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, script
}

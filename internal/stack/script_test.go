package stack_test

import (
	"bytes"
	"context"
	"errors"
	"net"
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
		// The probes above have just reached every server: a status that
		// says otherwise is the script's fault, or the stack was started
		// with settings (STOCKGUARD_STACK_DIR, ports) this environment
		// does not carry; either way the test cannot vouch for the script.
		t.Fatalf("every server answered its probe, but stack.sh status (as root, with this environment's STOCKGUARD_STACK_* settings) says the stack is not all up:\n%s"+
			"the script does not see the servers the tests use: a bug in its probes, or a stack started with other STOCKGUARD_STACK_* settings", rootOut)
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

// TestScriptQuietsOnlyTheUnitsItInstalled sources scripts/stack.sh and
// calls quiet_units, which `up` calls with the server packages its apt-get
// install has just added, with systemctl a shell function that records its
// arguments: with systemd running, each package's service is disabled and
// etcd's masked (its defaults take etcd1's ports), none is stopped, and
// other packages' units are not touched; without systemd nothing is issued.
func TestScriptQuietsOnlyTheUnitsItInstalled(t *testing.T) {
	for _, c := range []struct {
		name, systemd string
		pkgs          []string
		want          []string
	}{
		{"all three with systemd", "true", []string{"redis-server", "etcd-server", "postgresql-common"}, []string{
			"disable --quiet redis-server.service",
			"disable --quiet etcd.service",
			"mask --quiet etcd.service",
			"disable --quiet postgresql.service",
		}},
		{"only what was installed", "true", []string{"redis-server"}, []string{"disable --quiet redis-server.service"}},
		{"not a server package", "true", []string{"chromium", "default-jre-headless"}, nil},
		{"nothing installed", "true", nil, nil},
		{"without systemd", "false", []string{"redis-server", "etcd-server", "postgresql-common"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := filepath.Join(t.TempDir(), "calls")
			prog := `source ../../scripts/stack.sh
systemd_running() { ` + c.systemd + `; }
systemctl() { echo "$*" >>"$CALLS"; }
quiet_units "$@"`
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", append([]string{"-c", prog, "bash"}, c.pkgs...)...)
			cmd.Env = append(os.Environ(), "CALLS="+calls)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("quiet_units %v: %v\n%s", c.pkgs, err, out)
			}
			b, err := os.ReadFile(calls)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			var got []string
			if s := strings.TrimSpace(string(b)); s != "" {
				got = strings.Split(s, "\n")
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("systemctl calls:\n%s\nwant:\n%s\noutput:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"), out)
			}
		})
	}
}

// TestScriptFailedUpSaysHowToStop: an `up` that fails after it has started
// a server (here the second Redis, whose directory is a file) leaves that
// server running and prints the `down` command that stops it; the command,
// run as printed, does. It runs in a directory and on ports of its own,
// never the shared stack's.
func TestScriptFailedUpSaysHowToStop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: up starts the servers as root")
	}
	// With a package missing, up would install it first.
	for _, bin := range []string{"redis-server", "java", "etcd"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed: up would install it", bin)
		}
	}
	for _, f := range []string{"/usr/bin/chromium", "/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("%s missing: up would install it", f)
		}
	}
	if _, err := stack.PGBinDir(); err != nil {
		t.Skipf("no PostgreSQL binaries: up would install them (%v)", err)
	}
	dir, err := os.MkdirTemp("", "stack-failed-up-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".stockguard-stack"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	if err := os.MkdirAll(filepath.Join(dir, "redis"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "redis", strconv.Itoa(ports[1])), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pidfile := filepath.Join(dir, "redis", strconv.Itoa(ports[0]), "redis.pid")
	var pid int
	t.Cleanup(func() { // should the printed command not have stopped it
		if pid == 0 {
			pid = pidIn(pidfile, 10*time.Second)
		}
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); pid > 0 && strings.TrimSpace(string(comm)) == "redis-server" {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	redisPorts := strconv.Itoa(ports[0]) + "," + strconv.Itoa(ports[1])
	code, out := runScript(t, "../../scripts/stack.sh", []string{"STOCKGUARD_STACK_DIR=" + dir, "STOCKGUARD_STACK_REDIS_PORTS=" + redisPorts}, "", "up")
	if code == 0 {
		t.Fatalf("up succeeded with a file for a Redis directory:\n%s", out)
	}
	_, after, _ := strings.Cut(out, "Stop it with:\n")
	want, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(after, "stack:")), "\n")
	if !strings.Contains(out, "what it started still runs (redis :"+strconv.Itoa(ports[0])+")") ||
		!strings.HasPrefix(want, "STOCKGUARD_STACK_DIR="+dir+" ") || !strings.Contains(want, " STOCKGUARD_STACK_REDIS_PORTS="+redisPorts+" ") ||
		!strings.HasSuffix(want, " bash ../../scripts/stack.sh down") {
		t.Fatalf("failed up's output lacks what still runs and the down command with its settings:\n%s", out)
	}
	// A daemonized Redis writes its pidfile once it has bound its port.
	pid = pidIn(pidfile, 10*time.Second)
	if pid <= 0 {
		t.Fatalf("the first Redis wrote no pid to %s after the failed up:\n%s", pidfile, out)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the first Redis (pid %d) is gone after the failed up, which must not stop it: %v", pid, err)
	}
	// The command as printed.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	down, err := exec.CommandContext(ctx, "bash", "-c", want).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", want, err, down)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("Redis pid %d still runs after %s:\n%s", pid, want, down)
	}
}

// pidIn waits up to limit for file to hold a PID and returns it (0: none).
func pidIn(file string, limit time.Duration) int {
	for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid
			}
		}
		if time.Now().After(deadline) {
			return 0
		}
	}
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		defer ln.Close()
	}
	return ports
}

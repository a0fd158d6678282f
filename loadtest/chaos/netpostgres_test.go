package chaos

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// envPdeathParent turns the test binary into the parent of
// TestAsPostgresDiesWithParent's process (main_test.go): it starts
// `sleep 60` through asPostgres as netns.Topology.Start starts postgres,
// prints its PID once it runs as the postgres user, and exits.
const envPdeathParent = "SGCHAOS_TEST_PDEATH_PARENT"

func pdeathParent() error {
	cmd := exec.Command("setpriv", asPostgres("/bin/sleep", "60")...)
	// As netns.Topology.Start sets it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	// Exit only once setpriv has changed the user and exec'd: dying before
	// would kill it on the parent-death signal Start set, fix or not.
	for range 500 {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)); strings.TrimSpace(string(comm)) == "sleep" {
			fmt.Println(cmd.Process.Pid)
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	return fmt.Errorf("setpriv did not exec sleep within 5s")
}

// TestAsPostgresDiesWithParent: a program started through asPostgres dies
// with its parent, as postgres must when the load tester crashes; setpriv
// would otherwise clear the parent-death signal when it changes the user.
func TestAsPostgresDiesWithParent(t *testing.T) {
	if os.Getenv(stacktest.EnvSkipIntegration) == "1" {
		t.Skipf("needs root and the postgres user; %s=1", stacktest.EnvSkipIntegration)
	}
	if os.Geteuid() != 0 {
		t.Fatal("setpriv --reuid needs root")
	}
	if _, err := user.Lookup("postgres"); err != nil {
		t.Fatalf("postgres user: %v (run bash scripts/stack.sh up, which installs PostgreSQL)", err)
	}
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), envPdeathParent+"=1")
	parent.Stderr = os.Stderr
	out, err := parent.Output()
	if err != nil {
		t.Fatalf("parent: %v", err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	pid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("parent printed %q", out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("pid %d, started through asPostgres, still runs 5s after its parent exited", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether pid is a live sleep (not gone, not a zombie).
func running(pid int) bool {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	name, state := "", ""
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Name:"); ok {
			name = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "State:"); ok {
			state = strings.TrimSpace(v)
		}
	}
	return name == "sleep" && !strings.HasPrefix(state, "Z")
}

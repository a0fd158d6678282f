// Package procs starts and stops the service instances the load tester
// drives: `stockguard serve` child processes on free loopback ports, each
// logging to a file, health-checked over HTTP, stopped with SIGTERM then
// SIGKILL, and killed by the kernel if the load tester dies first. It
// starts only the service; the lock servers a chaos run owns are started
// through internal/stack by package chaos.
package procs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
)

// stopGrace is how long an instance gets to drain after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// readyWait bounds the wait for one instance's /readyz once it is healthy,
// apart from the start timeout: an instance that is never ready must not
// use up the time the next ones have to start. Its database part answers
// within 2 s, so this is a few tries.
const readyWait = 10 * time.Second

// ServeOptions is how compare, chaos and bench start `stockguard serve` for one backend.
type ServeOptions struct {
	Bin         string // the stockguard binary
	Lock        string // --lock
	Fencing     string // --fencing (on|off)
	LockTTL     string // --lock-ttl; empty: the service's default
	AdminToken  string // passed as STOCKGUARD_ADMIN_TOKEN, out of the process list
	RedisAddrs  string // empty: not passed (the service's default or env applies)
	ZKServers   string
	DatabaseURL string
	LogDir      string   // each instance logs to LogDir/<lock>-<n>.log
	Extra       []string // further serve flags

	EtcdEndpoints string // --etcd-endpoints; empty: not passed
}

// Args is the serve command line (after the binary) of an instance
// listening on addr, for callers that start the process themselves (chaos
// runs some inside network namespaces); give it Environ's environment.
func (o ServeOptions) Args(addr string) []string { return o.args(addr) }

func (o ServeOptions) args(addr string) []string {
	args := []string{"serve", "--addr=" + addr, "--lock=" + o.Lock, "--fencing=" + o.Fencing}
	for _, kv := range [][2]string{{"lock-ttl", o.LockTTL}, {"redis-addrs", o.RedisAddrs}, {"zk-servers", o.ZKServers}, {"etcd-endpoints", o.EtcdEndpoints}, {"database-url", o.DatabaseURL}} {
		if kv[1] != "" {
			args = append(args, "--"+kv[0]+"="+kv[1])
		}
	}
	return append(args, o.Extra...)
}

// Instance is one serve process Start started. Only Stop ends it.
type Instance struct {
	URL     string
	LogPath string

	// PeakRSSMB is the process's peak resident set (VmHWM) in MiB, read by
	// Stop just before SIGTERM; 0 where /proc is not available.
	PeakRSSMB float64

	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has been waited for
	waitErr error
	logFile *os.File
}

// Start starts n serve processes on free loopback ports and waits until
// each answers /healthz within timeout, then, best effort, /readyz within
// min(timeout, readyWait) more. The first instance is started and waited
// for alone, so that it applies the database migrations before the others
// race to; the others then get a timeout (and a readiness bound) of their
// own. On any failure it stops those already started.
func Start(ctx context.Context, o ServeOptions, n int, timeout time.Duration) ([]*Instance, error) {
	c := client.New(2, "", 2*time.Second)
	defer c.Close()
	var out []*Instance
	for _, batch := range [][2]int{{0, min(1, n)}, {min(1, n), n}} {
		start := len(out)
		deadline := time.Now().Add(timeout)
		for i := batch[0]; i < batch[1]; i++ {
			in, err := startInstance(o, i)
			if err != nil {
				_ = StopAll(out)
				return nil, err
			}
			out = append(out, in)
		}
		for _, in := range out[start:] {
			if err := in.waitHealthy(ctx, c, deadline); err != nil {
				_ = StopAll(out)
				return nil, err
			}
		}
		ready := time.Now().Add(min(timeout, readyWait))
		for _, in := range out[start:] {
			in.waitReady(ctx, c, ready)
		}
	}
	return out, nil
}

func startInstance(o ServeOptions, i int) (*Instance, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(o.LogDir, fmt.Sprintf("%s-%d.log", o.Lock, i))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("instance log: %w", err)
	}
	// Not exec.CommandContext: a cancelled run must still stop its children
	// gracefully (SIGTERM, then SIGKILL), which Stop does.
	cmd := exec.Command(o.Bin, o.args(addr)...)
	cmd.Env = o.Environ()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttrs()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s serve --lock=%s: %w", o.Bin, o.Lock, err)
	}
	in := &Instance{URL: "http://" + addr, LogPath: logPath, cmd: cmd, exited: make(chan struct{}), logFile: f}
	go func() {
		in.waitErr = cmd.Wait()
		close(in.exited)
	}()
	return in, nil
}

// waitHealthy polls /healthz until 200, the process exits, or the deadline.
func (in *Instance) waitHealthy(ctx context.Context, c *client.Client, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var last error
	for {
		select {
		case <-in.exited:
			return fmt.Errorf("instance %s exited during start (%v); log %s:\n%s", in.URL, in.waitErr, in.LogPath, Tail(in.LogPath, 15))
		default:
		}
		if last = c.Healthy(ctx, in.URL); last == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("instance %s not healthy in time: %w; log %s:\n%s", in.URL, last, in.LogPath, Tail(in.LogPath, 15))
		}
		pause(ctx, 50*time.Millisecond)
	}
	return nil
}

// waitReady polls /readyz until 200 or the deadline. Readiness (the instance's
// database reachable and migrated; the lock backend's health is not part
// of it, by design) is waited for but not required: a run against an
// instance whose database is down fails on its first PUT, with the reason.
func (in *Instance) waitReady(ctx context.Context, c *client.Client, deadline time.Time) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for ctx.Err() == nil {
		if c.Ready(ctx, in.URL) == nil {
			return
		}
		pause(ctx, 100*time.Millisecond)
	}
}

// PID is the instance's process id.
func (in *Instance) PID() int { return in.cmd.Process.Pid }

// Signal sends sig to the instance's process: SIGSTOP and SIGCONT freeze
// and thaw it, as a long GC pause would.
func (in *Instance) Signal(sig os.Signal) error { return in.cmd.Process.Signal(sig) }

// Stop sends SIGTERM to the instance's PID, waits up to stopGrace for it to
// drain, then sends SIGKILL. It returns the process's exit error if it did
// not exit cleanly after SIGTERM.
func (in *Instance) Stop() error {
	defer in.logFile.Close()
	select {
	case <-in.exited:
		return fmt.Errorf("instance %s had already exited: %v", in.URL, in.waitErr)
	default:
	}
	// Read before SIGTERM: the high-water mark of the load, not of the drain,
	// and while /proc/<pid> still exists.
	in.PeakRSSMB, _ = peakRSSMB(in.cmd.Process.Pid)
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", in.URL, err)
	}
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-in.exited:
		if in.waitErr != nil {
			return fmt.Errorf("instance %s exited with %w after SIGTERM", in.URL, in.waitErr)
		}
		return nil
	case <-t.C:
	}
	_ = in.cmd.Process.Kill()
	<-in.exited
	return fmt.Errorf("instance %s did not stop within %v of SIGTERM; killed", in.URL, stopGrace)
}

// StopAll stops every instance concurrently and joins their errors.
func StopAll(ins []*Instance) error {
	errs := make([]error, len(ins))
	done := make(chan int)
	for i, in := range ins {
		go func() {
			errs[i] = in.Stop()
			done <- i
		}()
	}
	for range ins {
		<-done
	}
	return errors.Join(errs...)
}

// freePort asks the kernel for a free loopback port. Another process may take
// it before the instance binds; the instance then exits and Start
// reports its log.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Tail returns the last n lines of a (small) log file, indented: what a
// failure shows of an instance's log.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "    (no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// pause waits d or until ctx is done, whichever comes first.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// LogRoot returns the directory instances keep their logs in: dir, made if
// missing and always kept, or else a new temporary directory named
// prefix*. The clean-up removes a temporary one unless asked to keep it and
// a log in it holds something (a run interrupted before any instance
// started leaves none: every failed run kept an empty one), says on stderr
// where a kept one is, and reports whether the directory is still there.
func LogRoot(dir, prefix string, stderr io.Writer) (string, func(keep bool) bool, error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, err
		}
		return dir, func(bool) bool { return true }, nil
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return d, func(keep bool) bool {
		if keep && holdsFiles(d) {
			fmt.Fprintf(stderr, "instance logs kept in %s\n", d)
			return true
		}
		_ = os.RemoveAll(d)
		return false
	}, nil
}

// holdsFiles reports whether a non-empty file lies anywhere under dir.
func holdsFiles(dir string) bool {
	found := errors.New("found")
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: look on
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil && fi.Size() > 0 {
				return found
			}
		}
		return nil
	})
	return errors.Is(err, found)
}

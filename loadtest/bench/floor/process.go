package floor

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// ReadyPrefix starts the line a floor process prints once it listens,
// followed by its base URL: how Start learns the port it chose.
const ReadyPrefix = "floor listening on "

// ErrNotReady is returned for a floor process that did not print its
// ready line in time.
var ErrNotReady = errors.New("floor process did not listen")

// Serve listens on addr (port 0: any free one), prints the ready line
// to out and serves the floor until ctx ends.
func Serve(ctx context.Context, addr string, out io.Writer) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	srv := &http.Server{Handler: Handler(), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(out, "%shttp://%s\n", ReadyPrefix, l.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("floor: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return fmt.Errorf("floor: shutdown: %w", err)
	}
	return nil
}

// Process is one floor process Start started.
type Process struct {
	URL    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// PID is the process id, for the CPU meter.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Start starts n floor processes, bin followed by args (`stockguard load
// floor`, which must serve on a free loopback port and print the ready
// line), and waits up to timeout for each to print it.
func Start(ctx context.Context, bin string, args []string, n int, timeout time.Duration) ([]*Process, error) {
	var out []*Process
	for range n {
		p, err := start(ctx, bin, args, timeout)
		if err != nil {
			StopAll(out)
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func start(ctx context.Context, bin string, args []string, timeout time.Duration) (*Process, error) {
	// Not CommandContext: Stop ends it with SIGTERM, and childAttrs has the
	// kernel kill it if the bench dies first.
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = childAttrs()
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("floor: start %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), ReadyPrefix); ok {
				ready <- u
			}
		}
		_ = cmd.Wait()
		close(p.exited)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case p.URL = <-ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("floor: %s %s exited before listening", bin, strings.Join(args, " "))
	case <-t.C:
	case <-ctx.Done():
	}
	p.Stop()
	return nil, fmt.Errorf("floor: %s within %v: %w", bin, timeout, cmp.Or(ctx.Err(), ErrNotReady))
}

// Stop sends SIGTERM and, after 5 s, SIGKILL, and waits for the exit.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// StopAll stops every process.
func StopAll(ps []*Process) {
	for _, p := range ps {
		p.Stop()
	}
}

package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Bounds on waiting for a child server; a caller's context can only shorten them.
const (
	startTimeout = 30 * time.Second
	killTimeout  = 10 * time.Second
	pollInterval = 50 * time.Millisecond
)

// process is one child server. Its fields are set before the wait goroutine
// starts and never change, so the methods need no lock.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the child has exited and been reaped
}

// startProcess runs bin with its output appended to logPath. The child lives
// until killed: it is deliberately not tied to any context, because callers
// pass a context to bound the start-up wait, not the server's lifetime.
func startProcess(bin string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("stack: open log for %s: %w", bin, err)
	}
	// The child gets its own dup of the descriptor; ours is not needed after Start.
	defer logFile.Close()

	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("stack: start %s: %w", bin, err)
	}
	p := &process{name: bin, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the child by PID; a child that already exited is not an
// error for SIGKILL (the caller wanted it gone) but is for anything else.
func (p *process) signal(sig syscall.Signal) error {
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		if sig == syscall.SIGKILL {
			return nil
		}
		return fmt.Errorf("stack: %s (pid %d) is not running", p.name, p.pid())
	}
	if err != nil {
		return fmt.Errorf("stack: send %v to %s (pid %d): %w", sig, p.name, p.pid(), err)
	}
	return nil
}

// kill sends SIGKILL and waits until the child is reaped, so that its port is
// free and its PID gone when kill returns.
func (p *process) kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("stack: %s (pid %d) still running %v after SIGKILL", p.name, p.pid(), killTimeout)
	}
}

// waitReady polls check until it succeeds. It gives up early when the child
// exits, because then the check can never succeed, and says why using the
// tail of the child's log.
func (p *process) waitReady(ctx context.Context, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		probeCtx, probeCancel := context.WithTimeout(ctx, time.Second)
		// A probe must not keep waiting on a port that a dead child never
		// bound (someone else may hold it and never answer).
		go func() {
			select {
			case <-p.done:
				probeCancel()
			case <-probeCtx.Done():
			}
		}()
		err := check(probeCtx)
		probeCancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("stack: %s exited during start-up (%s): %w%s",
				what, p.cmd.ProcessState, err, logTail(p.logPath))
		case <-ctx.Done():
			return fmt.Errorf("stack: %s not ready: %w (last probe: %w)%s", what, ctx.Err(), err, logTail(p.logPath))
		case <-tick.C:
		}
	}
}

// logTail returns the last lines of a server log, formatted to end an error.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "\n  log " + path + ":\n    " + strings.Join(lines, "\n    ")
}

// freePorts asks the kernel for n distinct free loopback ports. All listeners
// stay open until every port is chosen so that no port is handed out twice;
// another process may still grab one before the server binds it, which the
// callers accept (it shows up as a start-up error naming the port).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("stack: find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

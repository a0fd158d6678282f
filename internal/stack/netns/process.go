//go:build linux

package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// killTimeout bounds the wait for a SIGKILLed process to be reaped.
const killTimeout = 10 * time.Second

// Process is a program running inside a member namespace.
type Process struct {
	member *Member
	cmd    *exec.Cmd
	done   chan struct{} // closed once the process has exited and been reaped
	err    error         // the exit status; read only after done is closed
}

// Start runs cmd inside member name, through `ip netns exec`, which joins
// the namespace and then execs cmd's program, so the returned process's PID
// is the program's own (signal it by PID to pause or kill it). Set cmd's
// Stdout, Stderr, Env and Dir as usual; Start rewrites its Path, Args and
// SysProcAttr. The process gets its own process group (a Ctrl-C aimed at the
// caller does not reach it) and is SIGKILLed by the kernel when the caller
// dies; Close kills it too. It must not daemonize: a forked-off daemon is
// only found again by Close's sweep of the namespace's processes.
func (t *Topology) Start(name string, cmd *exec.Cmd) (*Process, error) {
	m, err := t.member(name)
	if err != nil {
		return nil, err
	}
	if cmd.Err != nil {
		return nil, fmt.Errorf("netns: start in %s: %w", name, cmd.Err)
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("netns: start in %s: %w", name, err)
	}
	cmd.Args = append([]string{ip, "netns", "exec", m.namespace, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = ip
	// Pdeathsig fires when the forking OS thread exits; the runtime retires
	// only threads left locked by an exiting goroutine, which DialContext
	// does only after a failed setns and never while starting a process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errClosed
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("netns: start %s in %s: %w", cmd.Args[4], name, err)
	}
	p := &Process{member: m, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.procs = append(t.procs, p)
	return p, nil
}

// PID is the process's PID in the host's PID namespace.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Member is the member the process runs in.
func (p *Process) Member() *Member { return p.member }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error (nil for exit status 0); call it after
// Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Signal sends sig to the process by PID; SIGSTOP and SIGCONT are the
// honest "GC pause". A process that already exited is an error, except for
// SIGKILL.
func (p *Process) Signal(sig syscall.Signal) error {
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) && sig == syscall.SIGKILL {
		return nil
	}
	if err != nil {
		return fmt.Errorf("netns: send %v to pid %d in %s: %w", sig, p.PID(), p.member.name, err)
	}
	return nil
}

// Kill sends SIGKILL and waits (at most killTimeout) until the process is
// reaped, so its PID and ports are free when Kill returns. Killing an exited
// process is not an error.
func (p *Process) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("netns: pid %d in %s still running %v after SIGKILL", p.PID(), p.member.name, killTimeout)
	}
}

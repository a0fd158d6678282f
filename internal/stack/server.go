package stack

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// server is the life cycle every child server of the stack shares (a
// redis-server, a ZooKeeper node, an etcd member): its current process,
// which Restart replaces, and the signals sent to it. The owner says what
// the server is, how a process of it starts and when it serves. Its
// methods are safe for concurrent use.
type server struct {
	// Set before the server is shared, never changed.
	name  func() string            // "zookeeper node 2 (127.0.0.1:40123)", for errors
	boot  func() (*process, error) // starts a process without waiting for it
	ready func(*process) probeFunc // the probe that p serves requests
	mu    sync.Mutex
	proc  *process
}

// probeFunc checks once whether a starting server serves.
type probeFunc func(context.Context) error

// PID returns the process ID of the server's current process, or 0 if none
// was started.
func (s *server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid()
}

// Kill SIGKILLs the server (a crash: no shutdown) and returns once the
// process is gone. Killing a dead server is not an error.
func (s *server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	return s.proc.kill()
}

// Stop freezes the server with SIGSTOP: its connections stay open and
// requests queue unanswered, like a long pause or a hung host, until Cont.
func (s *server) Stop() error {
	return s.signal(syscall.SIGSTOP)
}

// Cont resumes a server frozen by Stop; it then serves what it received
// while frozen.
func (s *server) Cont() error {
	return s.signal(syscall.SIGCONT)
}

func (s *server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return errors.New("stack: " + s.name() + " was never started")
	}
	return s.proc.signal(sig)
}

// Restart kills the server if it still runs, starts it again with the same
// ports and directory, and returns once it serves (a server of a cluster
// needs a quorum of running peers for that).
func (s *server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		if err := s.proc.kill(); err != nil {
			return err
		}
	}
	return s.startLocked(ctx)
}

// startLocked launches a process and keeps it once it serves; a process
// that does not is killed. It must be called with s.mu held or before s
// is shared.
func (s *server) startLocked(ctx context.Context) error {
	p, err := s.boot()
	if err != nil {
		return err
	}
	if err := p.waitReady(ctx, s.name(), s.ready(p)); err != nil {
		_ = p.kill()
		return err
	}
	s.proc = p
	return nil
}

// base returns s itself, promoted to the types that embed a server, so that
// serversOf can take a cluster's members of any kind.
func (s *server) base() *server { return s }

// serversOf is the servers of a cluster's members.
func serversOf[M interface{ base() *server }](members []M) []*server {
	out := make([]*server, len(members))
	for i, m := range members {
		out[i] = m.base()
	}
	return out
}

// startAll launches every server before waiting for any, since no member
// of a cluster serves until a quorum runs, then waits for each. On failure
// it kills them all.
func startAll(ctx context.Context, ss []*server) error {
	for _, s := range ss {
		p, err := s.boot()
		if err != nil {
			_ = killAll(ss)
			return err
		}
		s.proc = p
	}
	for _, s := range ss {
		if err := s.proc.waitReady(ctx, s.name(), s.ready(s.proc)); err != nil {
			_ = killAll(ss)
			return err
		}
	}
	return nil
}

// killAll kills every server; a cluster's Close.
func killAll(ss []*server) error {
	var errs []error
	for _, s := range ss {
		errs = append(errs, s.Kill())
	}
	return errors.Join(errs...)
}

// leaderOf asks each server once whether it leads and returns the index of
// the first that does; kind names them in the error ("ZooKeeper node").
func leaderOf(ctx context.Context, kind string, n int, leads func(ctx context.Context, i int) (bool, error)) (int, error) {
	var errs []error
	for i := range n {
		ok, err := leads(ctx, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			return i, nil
		}
	}
	return -1, fmt.Errorf("stack: no %s reports leader: %w", kind, errors.Join(errs...))
}

// waitLeader polls leader until it names one or ctx ends, e.g. to time an
// election after the old leader was killed.
func waitLeader(ctx context.Context, leader func(context.Context) (int, error)) (int, error) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		i, err := leader(ctx)
		if err == nil {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-tick.C:
		}
	}
}

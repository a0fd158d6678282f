package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/loadtest/fakeservice"
)

// stockguardCmd is the test binary acting as stockguard with args.
func stockguardCmd(args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), beMain+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, &stdout, &stderr
}

// startStockguard starts stockguardCmd(args...) with env added, its stderr
// (the logs) collected; done gets Wait's error. A process still running at
// the test's end is killed.
func startStockguard(t *testing.T, env []string, args ...string) (cmd *exec.Cmd, stdout *bytes.Buffer, logs lockedWriter, done chan error) {
	t.Helper()
	cmd, stdout, _ = stockguardCmd(args...)
	cmd.Env = append(cmd.Env, env...)
	logs = lockedWriter{&strings.Builder{}, &sync.Mutex{}}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		close(exited)
		done <- err
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return cmd, stdout, logs, done
}

func exitStatus(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("run: %v", err)
	return -1
}

// TestExitStatus: 0 for help (on stdout), 2 for usage (on stderr), 3 for a
// run that found units oversold or lost, 1 for a run that could not be done.
func TestExitStatus(t *testing.T) {
	lossy := fakeservice.New("", true).Server(t)
	tests := []struct {
		name       string
		args       []string
		want       int
		wantStdout string // "" when stdout must be empty
		wantStderr string // "" when stderr must be empty
	}{
		{"serve help", []string{"serve", "--help"}, 0, "--lock=string", ""},
		{"load run help", []string{"load", "run", "-h"}, 0, "STOCKGUARD_LOAD_ORDERS", ""},
		{"bad flag value", []string{"load", "run", "--urls=http://127.0.0.1:1", "--orders", "many"}, 2, "", "--orders"},
		{"unknown flag", []string{"serve", "--nope"}, 2, "", "--nope"},
		{"oversold", []string{"load", "run", "--urls=" + lossy.URL, "--orders=400", "--concurrency=32", "--skus=2",
			"--stock=50", "--zipf=0", "--progress=off"}, 3, "UNSAFE", "unsafe"},
		{"unreachable", []string{"load", "run", "--urls=http://127.0.0.1:1", "--progress=off"}, 1, "", "not up"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd, stdout, stderr := stockguardCmd(tc.args...)
			if got := exitStatus(t, cmd.Run()); got != tc.want {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", got, tc.want, stdout, stderr)
			}
			for _, c := range []struct {
				name, want string
				got        *bytes.Buffer
			}{{"stdout", tc.wantStdout, stdout}, {"stderr", tc.wantStderr, stderr}} {
				if c.want == "" && c.got.Len() > 0 {
					t.Errorf("%s not empty:\n%s", c.name, c.got)
				}
				if !strings.Contains(c.got.String(), c.want) {
					t.Errorf("%s lacks %q:\n%s", c.name, c.want, c.got)
				}
			}
		})
	}
}

// TestInterruptPrintsPartialSummary: SIGINT during `load run` stops the
// sending, prints what was measured so far and exits 130.
func TestInterruptPrintsPartialSummary(t *testing.T) {
	s := fakeservice.New("", false).Server(t)
	cmd, stdout, _ := stockguardCmd("load", "run", "--urls="+s.URL, "--rate=40/s", "--duration=2m",
		"--skus=3", "--stock=1000", "--progress=on")
	stderr := lockedWriter{&strings.Builder{}, &sync.Mutex{}}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The progress bar names its unit once orders are being sent.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), "orders"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no progress within 30 s:\n%s", stderr)
		}
	}
	time.Sleep(time.Second)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("still running 30 s after SIGINT\n%s", stderr)
	}
	if got := exitStatus(t, err); got != exitInterrupted {
		t.Errorf("exit %d, want %d\nstderr:\n%s", got, exitInterrupted, stderr)
	}
	out := stdout.String()
	for _, want := range []string{"interrupted: what was measured so far", "INTERRUPTED after", "orders", "sent "} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "sent 0 ") {
		t.Errorf("nothing was measured before the signal:\n%s", out)
	}
}

package procs

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestInstanceHasItsOwnProcessGroup: a started instance leads a process
// group of its own, so a terminal's Ctrl-C, sent to the load tester's
// group, does not reach it.
func TestInstanceHasItsOwnProcessGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	o := ServeOptions{Bin: os.Args[0], Lock: "redis", Fencing: "on", LogDir: t.TempDir()}
	ins, err := Start(ctx, o, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = StopAll(ins) }()
	pid := ins[0].PID()
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	if pgid != pid || pgid == syscall.Getpgrp() {
		t.Fatalf("instance pid %d is in process group %d (the load tester's: %d), want a group of its own", pid, pgid, syscall.Getpgrp())
	}
}

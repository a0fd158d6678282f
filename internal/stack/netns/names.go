//go:build linux

package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultPrefix starts the name of every namespace a Topology creates unless
// WithPrefix says otherwise; Sweep(ctx, DefaultPrefix) finds the leftovers.
const DefaultPrefix = "sgnet-"

// bridgeSuffix names the namespace that holds the bridge; member names may
// not take it.
const bridgeSuffix = "bridge"

// owner identifies a process across PID reuse: its PID and its start time in
// clock ticks since boot (field 22 of /proc/PID/stat).
type owner struct {
	pid   int
	start uint64
}

func (o owner) String() string { return fmt.Sprintf("%d.%d", o.pid, o.start) }

// alive reports whether the process o names still runs: same PID, same start
// time.
func (o owner) alive() bool {
	start, err := startTime(o.pid)
	return err == nil && start == o.start
}

func self() (owner, error) {
	pid := os.Getpid()
	start, err := startTime(pid)
	if err != nil {
		return owner{}, err
	}
	return owner{pid: pid, start: start}, nil
}

func startTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("netns: read start time of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces and parentheses; the fields
	// after its closing parenthesis start with field 3.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	const startField = 22 - 3
	if len(fields) <= startField {
		return 0, fmt.Errorf("netns: parse /proc/%d/stat: %d fields", pid, len(fields))
	}
	start, err := strconv.ParseUint(fields[startField], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("netns: parse start time of pid %d: %w", pid, err)
	}
	return start, nil
}

// newRunID returns prefix + owner + "." + random hex: the part every
// namespace name of one Topology shares.
func newRunID(prefix string) (string, error) {
	o, err := self()
	if err != nil {
		return "", err
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("netns: random run id: %w", err)
	}
	return prefix + o.String() + "." + hex.EncodeToString(b[:]), nil
}

// parseOwner extracts the owner from a namespace name made by this package
// with prefix; ok is false for names this package did not make.
func parseOwner(prefix, name string) (owner, bool) {
	rest, found := strings.CutPrefix(name, prefix)
	if !found {
		return owner{}, false
	}
	id, _, found := strings.Cut(rest, "-")
	if !found {
		return owner{}, false
	}
	parts := strings.Split(id, ".")
	if len(parts) != 3 {
		return owner{}, false
	}
	pid, err1 := strconv.Atoi(parts[0])
	start, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return owner{}, false
	}
	return owner{pid: pid, start: start}, true
}

// listNamespaces returns the names of the named network namespaces (those
// under /run/netns), the way `ip netns list` finds them.
func listNamespaces() ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns: list %s: %w", netnsDir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// netnsDir is where ip netns keeps its namespace handles.
const netnsDir = "/run/netns"

// Sweep removes the namespaces named with prefix whose owning process is no
// longer running (a crashed or killed earlier run), killing any process still
// inside them first, and then the TempDirs of those owners. Namespaces and
// directories of live runs, and names without prefix, are left alone, so
// Sweep is safe while other runs are active. It returns the namespace names
// and directory paths it removed.
func Sweep(ctx context.Context, prefix string) ([]string, error) {
	if prefix == "" {
		return nil, errors.New("netns: sweep needs a non-empty prefix")
	}
	names, err := listNamespaces()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, name := range names {
		o, ok := parseOwner(prefix, name)
		if !ok || o.alive() {
			continue
		}
		if err := removeNamespace(ctx, name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	// After the namespaces: their processes, which may write into these
	// directories, are dead now.
	dirs, err := os.ReadDir(os.TempDir())
	if err != nil {
		return removed, errors.Join(append(errs, fmt.Errorf("netns: list temp dirs: %w", err))...)
	}
	for _, d := range dirs {
		o, ok := parseOwner(prefix, d.Name())
		if !ok || !d.IsDir() || o.alive() {
			continue
		}
		path := filepath.Join(os.TempDir(), d.Name())
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, fmt.Errorf("netns: remove temp dir: %w", err))
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}

// removeNamespace kills every process left in namespace name and deletes
// it; the veth ends and bridge inside vanish with it. A namespace that is
// already gone is not an error.
func removeNamespace(ctx context.Context, name string) error {
	if _, err := os.Stat(netnsDir + "/" + name); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	out, err := run(ctx, "", "ip", "netns", "pids", name)
	if err != nil {
		return err
	}
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			// Already exited is fine: gone is what we want.
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := run(ctx, "", "ip", "netns", "delete", name); err != nil {
		return err
	}
	return nil
}

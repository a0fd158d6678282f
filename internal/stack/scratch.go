package stack

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// pgDataPrefix starts the name of every data directory StartPostgres makes
// under the system's temporary directory.
const pgDataPrefix = "stockguard-pgdata-"

// ownerTag names the calling process across PID reuse: "PID.START", START
// being its start time in clock ticks since boot; ok is false where the
// start time cannot be read (not Linux).
func ownerTag() (tag string, ok bool) {
	pid := os.Getpid()
	start, err := procStart(pid)
	if err != nil {
		return "", false
	}
	return strconv.Itoa(pid) + "." + strconv.FormatUint(start, 10), true
}

// newScratchDir creates root/<prefix><owner>.<random>, a directory only
// the caller may enter, after removing those with prefix that a process no
// longer running made: a test binary killed before its clean-up (a
// timeout's panic, SIGKILL) leaves its directories behind. Without an
// owner tag (not Linux) it sweeps nothing.
func newScratchDir(root, prefix string) (string, error) {
	tag, ok := ownerTag()
	if !ok {
		return os.MkdirTemp(root, prefix)
	}
	_, _ = sweepScratch(root, prefix) // best effort: a leftover is no reason to fail
	return os.MkdirTemp(root, prefix+tag+".")
}

// sweepScratch removes the directories under root named prefix + "PID.START.N"
// whose owner, the process PID started at START, no longer runs, and
// returns their paths. Any other name (another prefix, no owner, a live
// owner's) and anything not a directory is left alone.
func sweepScratch(root, prefix string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("stack: list %s: %w", root, err)
	}
	var removed []string
	var firstErr error
	for _, e := range entries {
		pid, start, ok := parseScratchName(prefix, e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		if now, err := procStart(pid); err == nil && now == start {
			continue // its owner still runs
		}
		path := filepath.Join(root, e.Name())
		if err := os.RemoveAll(path); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("stack: remove %s: %w", path, err)
			}
			continue
		}
		removed = append(removed, path)
	}
	return removed, firstErr
}

// parseScratchName reads the owner out of a name newScratchDir made.
func parseScratchName(prefix, name string) (pid int, start uint64, ok bool) {
	rest, found := strings.CutPrefix(name, prefix)
	if !found {
		return 0, 0, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return 0, 0, false
	}
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	if start, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return 0, 0, false
	}
	if _, err := strconv.ParseUint(parts[2], 10, 64); err != nil {
		return 0, 0, false
	}
	return pid, start, true
}

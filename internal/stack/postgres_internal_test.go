package stack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPGBinDirPicksTheNewestComplete: whichever major versions are
// installed, the newest whose initdb and postgres are both executable wins,
// by number (16 after 9), and none found is an error naming where it
// looked.
func TestPGBinDirPicksTheNewestComplete(t *testing.T) {
	root := t.TempDir()
	for _, v := range []struct {
		version string
		bins    []string
	}{
		{"9", []string{"initdb", "postgres"}},
		{"13", []string{"initdb", "postgres"}},
		{"16", []string{"initdb", "postgres"}},
		{"17", []string{"initdb"}}, // half installed
	} {
		bin := filepath.Join(root, v.version, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range v.bins {
			if err := os.WriteFile(filepath.Join(bin, b), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := pgBinDirIn(filepath.Join(root, "*", "bin"))
	if want := filepath.Join(root, "16", "bin"); err != nil || got != want {
		t.Fatalf("pgBinDirIn = %q, %v; want %q", got, err, want)
	}
	if _, err := pgBinDirIn(filepath.Join(t.TempDir(), "*", "bin")); err == nil {
		t.Fatal("no versions installed, no error")
	}
}

// TestScratchSweepRemovesOnlyDeadOwners: of the directories under a root,
// only those named with the prefix by an owner that no longer runs go;
// a live owner's, another prefix's, an untagged one (os.MkdirTemp's names
// before owners were tagged) and a file stay.
func TestScratchSweepRemovesOnlyDeadOwners(t *testing.T) {
	root := t.TempDir()
	tag, ok := ownerTag()
	if !ok {
		t.Skip("no process start times here: nothing is swept")
	}
	pid := strconv.Itoa(os.Getpid())
	dead := pgDataPrefix + pid + ".0.123" // our PID, another start: a dead owner whose PID was reused
	keep := []string{
		pgDataPrefix + tag + ".456", // a live owner's
		"other-" + pid + ".0.789",   // another prefix
		pgDataPrefix + "1234567",    // untagged
		pgDataPrefix + pid + ".0.x", // not a name newScratchDir makes
		pgDataPrefix + "0.0.1",      // no such PID
	}
	for _, name := range append([]string{dead}, keep...) {
		if err := os.Mkdir(filepath.Join(root, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, dead, "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := pgDataPrefix + pid + ".0.999"
	if err := os.WriteFile(filepath.Join(root, file), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := sweepScratch(root, pgDataPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(root, dead)}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for _, name := range append(keep, file) {
		if _, err := os.Stat(filepath.Join(root, name)); err != nil {
			t.Errorf("%s: %v, want it kept", name, err)
		}
	}
}

// TestStartPostgresSweepsDeadOwnersData: StartPostgres names its data
// directory after its owner and removes the data directories a dead owner
// (a killed test binary) left in the temporary directory.
func TestStartPostgresSweepsDeadOwnersData(t *testing.T) {
	tag, ok := ownerTag()
	if !ok {
		t.Skip("no process start times here: nothing is swept")
	}
	left := filepath.Join(os.TempDir(), pgDataPrefix+strconv.Itoa(os.Getpid())+".0.1")
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(left) })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := StartPostgres(ctx, t.TempDir())
	if err != nil {
		// stacktest.EnvSkipIntegration (stacktest imports this package).
		if os.Getenv("STOCKGUARD_SKIP_INTEGRATION") == "1" {
			t.Skipf("cannot start postgres, skipping: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dead owner's data directory %s is still there (stat: %v)", left, err)
	}
	if base := filepath.Base(p.data); !strings.HasPrefix(base, pgDataPrefix+tag+".") {
		t.Errorf("data directory %s does not carry its owner %s", p.data, tag)
	}
}

package models

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// variant is one spin run: a model, the preprocessor defines that weaken it,
// and whether a counterexample is the expected outcome.
type variant struct {
	model   string
	defines []string
	unsafe  bool
	why     string
}

var variants = []variant{
	{"claim.pml", nil, false, "claim, read, write: no lost update whatever the interleaving"},
	{"claim.pml", []string{"-DNOCLAIM"}, true, "a plain read before a fenced write lets a paused holder's write land between"},
	{"claim.pml", []string{"-DNOHOLDER"}, true, "an equal token from another lease must be refused by the lease id"},
	{"claim.pml", []string{"-DNOFENCE"}, true, "--fencing=off: nothing stops a stale write"},
	{"redlock.pml", nil, false, "five nodes: tokens increase within the fault budget"},
	{"redlock.pml", []string{"-DNODES=3"}, false, "three nodes: tokens increase within the fault budget"},
	{"redlock.pml", []string{"-DHELDONLY"}, true, "round two only where the lock is held: a node with a foreign key never learns the token"},
	{"redlock.pml", []string{"-DNODES=3", "-DHELDONLY"}, true, "the same with three nodes"},
	{"redlock.pml", []string{"-DNOROUND2"}, true, "without round two no counter moves"},
}

func TestModels(t *testing.T) {
	spin, err := exec.LookPath("spin")
	if err != nil {
		t.Fatal("spin is not installed: run `make model` (or apt-get install -y spin)")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatal("gcc is not installed: apt-get install -y gcc")
	}
	for _, v := range variants {
		name := strings.TrimSuffix(v.model, ".pml") + strings.Join(v.defines, "")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, trail := check(t, spin, cc, v)
			errs := regexp.MustCompile(`errors: (\d+)`).FindStringSubmatch(out)
			if errs == nil {
				t.Fatalf("no verdict from pan:\n%s", out)
			}
			switch {
			case v.unsafe && errs[1] == "0":
				t.Fatalf("%s: expected a counterexample, pan found none:\n%s", v.why, out)
			case v.unsafe:
				t.Logf("counterexample, as expected (%s):\n%s", v.why, trail)
			case errs[1] != "0":
				t.Fatalf("%s: pan found a violation:\n%s\n%s", v.why, out, trail)
			case strings.Contains(out, "max search depth too small"):
				t.Fatalf("search was cut short; raise -m:\n%s", out)
			}
		})
	}
}

// check builds and runs the verifier for v in a scratch directory and
// returns pan's report and, when it found one, the replayed counterexample.
func check(t *testing.T, spin, cc string, v variant) (report, trail string) {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile(v.model)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, v.model), src, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil && name != "./pan" {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(spin, append(append([]string{"-a"}, v.defines...), v.model)...)
	// -DSAFETY: assertions only; -w: spin's generated code trips gcc's
	// bounds warnings on its own loop variables.
	run(cc, "-O2", "-w", "-DSAFETY", "-o", "pan", "pan.c")
	report = run("./pan", "-w20", "-m100000")
	if _, err := os.Stat(filepath.Join(dir, v.model+".trail")); err == nil {
		trail = run(spin, append(append([]string{"-t", "-p", "-g"}, v.defines...), v.model)...)
		if lines := strings.Split(trail, "\n"); len(lines) > 80 {
			trail = "…\n" + strings.Join(lines[len(lines)-80:], "\n")
		}
	}
	return report, trail
}

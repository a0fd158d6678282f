package gctune

import (
	"runtime/debug"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// current reads the settings the way the runtime reports them to
// debug's setters, to check Settings against.
func current() (percent int, limit int64) {
	percent = debug.SetGCPercent(100)
	debug.SetGCPercent(percent)
	return percent, debug.SetMemoryLimit(-1)
}

func TestSettingsReadsWhatIsInEffect(t *testing.T) {
	defer Apply(env(nil))()
	if p, l := Settings(); p != Percent || l != MemoryLimit {
		t.Fatalf("Settings() = %d, %d; want %d, %d", p, l, Percent, MemoryLimit)
	}
	debug.SetGCPercent(250)
	p, l := Settings()
	if cp, cl := current(); p != cp || l != cl {
		t.Fatalf("Settings() = %d, %d; the runtime's setters say %d, %d", p, l, cp, cl)
	}
}

func TestApplySetsDefaultsAndRestores(t *testing.T) {
	p0, l0 := current()
	restore := Apply(env(nil))
	if p, l := current(); p != Percent || l != MemoryLimit {
		t.Fatalf("applied: GOGC %d, limit %d; want %d, %d", p, l, Percent, MemoryLimit)
	}
	restore()
	if p, l := current(); p != p0 || l != l0 {
		t.Fatalf("restored: GOGC %d, limit %d; want %d, %d", p, l, p0, l0)
	}
}

// The operator's GOGC and GOMEMLIMIT win: the runtime has applied them at
// start, and Apply leaves each alone.
func TestApplyLeavesTheEnvironmentsSettings(t *testing.T) {
	p0, l0 := current()
	defer Apply(env(map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"}))()
	if p, l := current(); p != p0 || l != l0 {
		t.Fatalf("GOGC %d, limit %d changed; want %d, %d", p, l, p0, l0)
	}
	restore := Apply(env(map[string]string{"GOGC": "off"}))
	defer restore()
	if p, l := current(); p != p0 || l != MemoryLimit {
		t.Fatalf("GOGC set, limit not: GOGC %d, limit %d; want %d, %d", p, l, p0, MemoryLimit)
	}
}

package cpu

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// statLine is a /proc/<pid>/stat line with the given fields and a name
// that holds a space and parentheses, as "(sd-pam)" or "tmux: server" do.
func statLine(pid, ppid int, utime, stime, cutime, cstime int64) string {
	return fmt.Sprintf("%d (my (odd) name) S %d %d %d 0 -1 4194560 100 0 0 0 %d %d %d %d 20 0 1 0 42 1000 10\n",
		pid, ppid, pid, pid, utime, stime, cutime, cstime)
}

func TestParseStat(t *testing.T) {
	got, err := ParseStat(statLine(812, 1, 250, 50, 7, 3))
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{PID: 812, PPID: 1, Own: 3 * time.Second, OwnSys: 500 * time.Millisecond,
		Reaped: 100 * time.Millisecond, ReapedSys: 30 * time.Millisecond}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "812 S 1", "x (a) S 1 2", "812 (a) S 1 2 3 4 5 6 7 8 9 10 u 12 13 14 15 16"} {
		if _, err := ParseStat(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err %v, want ErrMalformed", bad, err)
		}
	}
}

// ioText is a /proc/<pid>/io with the given system calls.
func ioText(reads, writes int64) string {
	return fmt.Sprintf("rchar: 1000\nwchar: 2000\nsyscr: %d\nsyscw: %d\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n", reads, writes)
}

func TestParseIO(t *testing.T) {
	got, err := ParseIO(ioText(380, 147))
	if err != nil || got != 527 {
		t.Errorf("got %d, %v; want 527", got, err)
	}
	for _, bad := range []string{"", "rchar: 1\nwchar: 2\n", "syscr: 1\n", "syscr: x\nsyscw: 2\n"} {
		if _, err := ParseIO(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err %v, want ErrMalformed", bad, err)
		}
	}
}

// machineText is a /proc/stat whose aggregate line has busy ticks of
// user, idle ones and stolen ones (and guest ticks, which user already
// holds), followed by a CPU's own line, as the kernel writes it.
func machineText(user, idle, steal int64) string {
	return fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 %d 7 0\ncpu0 1 0 0 1 0 0 0 0 0 0\nintr 1\n", user, idle, steal)
}

// writeMachine puts text in dir as its /proc/stat.
func writeMachine(t *testing.T, dir, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestParseMachine(t *testing.T) {
	got, err := ParseMachine(machineText(250, 700, 50))
	if err != nil {
		t.Fatal(err)
	}
	// Guest time (7) is inside user already: not counted twice.
	if want := (Machine{Total: 10 * time.Second, Steal: 500 * time.Millisecond}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 3 4 5 6 7 x\n"} {
		if _, err := ParseMachine(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err %v, want ErrMalformed", bad, err)
		}
	}
}

// fakeProc writes a /proc with the given stat lines (pid → line) and, for
// the pids in ios, an io file.
func fakeProc(t *testing.T, dir string, stats map[int]string, ios ...map[int]string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	for pid, line := range stats {
		d := filepath.Join(dir, fmt.Sprint(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, io := range ios {
			if text, ok := io[pid]; ok {
				if err := os.WriteFile(filepath.Join(d, "io"), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestBetween checks the window's arithmetic: a child that exits in the
// window counts only what it used after the first snapshot (its total
// reaches the root's reaped time), a child born in it counts whole, and
// a process of no class counts nothing.
func TestBetween(t *testing.T) {
	dir := t.TempDir()
	m := newMeter(dir, []Class{
		{Name: "postgres", Roots: []int{100}, Children: true},
		{Name: "instances", Roots: []int{200, 201}},
		{Name: "zookeeper"}, // no roots: left out
	})
	fakeProc(t, dir, map[int]string{
		100: statLine(100, 1, 100, 0, 0, 0),
		101: statLine(101, 100, 50, 0, 0, 0), // exits in the window
		102: statLine(102, 100, 30, 0, 0, 0),
		200: statLine(200, 1, 10, 10, 0, 0),
		201: statLine(201, 1, 0, 0, 0, 0),
		300: statLine(300, 1, 999, 0, 0, 0), // of no class
	}, map[int]string{100: ioText(10, 10), 101: ioText(500, 500), 102: ioText(0, 0), 200: ioText(100, 50), 201: ioText(0, 0)})
	writeMachine(t, dir, machineText(600, 300, 100))
	before, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	fakeProc(t, dir, map[int]string{
		100: statLine(100, 1, 110, 0, 60, 5), // reaped 101: 60+5 ticks in all
		102: statLine(102, 100, 40, 0, 0, 0),
		103: statLine(103, 100, 20, 0, 0, 0), // born in the window
		200: statLine(200, 1, 30, 20, 0, 0),
		201: statLine(201, 1, 5, 5, 0, 0),
		300: statLine(300, 1, 5000, 0, 0, 0),
	}, map[int]string{100: ioText(20, 20), 102: ioText(30, 20), 103: ioText(40, 0), 200: ioText(400, 150), 201: ioText(25, 25)})
	// 400 ticks of the machine's in the window, 100 of them stolen.
	writeMachine(t, dir, machineText(800, 400, 200))
	after, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	after.At = before.At.Add(2 * time.Second)
	w := m.Between(before, after, 100)
	// postgres: root 10 + reaped 65 − 101's 50 before + 102's 10 + 103's 20 = 55 ticks,
	// 5 of them the kernel's (101's reaped cstime); system calls 20 + 50 + 40
	// (101's went with it).
	// instances: 30 + 10 = 40 ticks, 10 + 5 the kernel's; 400 + 50 calls.
	pg, inst := 1.1, 4.5
	want := []Usage{{Class: "postgres", Processes: 3, CPUS: 0.55, PerOrderUs: 5500, KernelPerOrderUs: 500, SyscallsPerOrder: &pg},
		{Class: "instances", Processes: 2, CPUS: 0.4, PerOrderUs: 4000, KernelPerOrderUs: 1500, SyscallsPerOrder: &inst}}
	// 0.95 s of CPU in 2 s.
	if fmt.Sprint(usages(w.Classes)) != fmt.Sprint(usages(want)) || w.TotalPerOrderUs != 9500 || w.DurationS != 2 || w.Orders != 100 || w.CoresBusy != 0.48 {
		t.Errorf("got %+v, want classes %+v, total 9500 µs, 2 s, 100 orders, 0.48 cores", w, want)
	}
	if w.StealShare == nil || *w.StealShare != 0.25 || w.CoresHad(2) != 1.5 || w.TurnStealShares != nil {
		t.Errorf("steal share %v, cores had %v; want 0.25 of the machine's time stolen, 1.5 of 2 cores had", w.StealShare, w.CoresHad(2))
	}
	if none := m.Between(before, after, 0); none.Classes[0].PerOrderUs != 0 || none.TotalPerOrderUs != 0 ||
		none.Classes[0].SyscallsPerOrder != nil {
		t.Errorf("no orders: %+v, want no per-order figures", none)
	}
}

// TestAcross: a window measured in two spans counts what the classes used
// within them, not between them, over the spans' length.
func TestAcross(t *testing.T) {
	dir := t.TempDir()
	m := newMeter(dir, []Class{{Name: "instances", Roots: []int{200}}})
	snap := func(ticks int64, at time.Duration) Snapshot {
		fakeProc(t, dir, map[int]string{200: statLine(200, 1, ticks, 0, 0, 0)}, map[int]string{200: ioText(ticks, 0)})
		// 200 of the machine's ticks a second, a tenth of them stolen but
		// for the stretch between the spans, where all of them are.
		stolen := min(at, time.Second)/(50*time.Millisecond) + max(at-5*time.Second, 0)/(50*time.Millisecond) + 800*min(max(at-time.Second, 0), 4*time.Second)/(4*time.Second)
		writeMachine(t, dir, machineText(int64(200*at/time.Second)-int64(stolen), 0, int64(stolen)))
		s, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		s.At = time.Unix(1000, 0).Add(at)
		return s
	}
	// 10 ticks in the first second, 500 between the spans, 30 in the last.
	a, b, c, d := snap(0, 0), snap(10, time.Second), snap(510, 5*time.Second), snap(540, 6*time.Second)
	w := m.Across([]Span{{a, b}, {c, d}}, 40)
	calls := 1.0
	want := []Usage{{Class: "instances", Processes: 1, CPUS: 0.4, PerOrderUs: 10000, SyscallsPerOrder: &calls}}
	if fmt.Sprint(usages(w.Classes)) != fmt.Sprint(usages(want)) || w.DurationS != 2 || w.CoresBusy != 0.2 || w.TotalPerOrderUs != 10000 {
		t.Errorf("got %+v, want classes %+v over 2 s, 0.2 cores", w, want)
	}
	if w.StealShare == nil || *w.StealShare != 0.1 || fmt.Sprint(w.TurnStealShares) != "[0.1 0.1]" {
		t.Errorf("steal share %v, turns %v; want the spans' 0.1 each, not the stretch between them", w.StealShare, w.TurnStealShares)
	}
}

// TestBetweenWithoutIO: a process whose io cannot be read leaves its
// class's system calls out, not counted as none; the CPU is still there.
func TestBetweenWithoutIO(t *testing.T) {
	dir := t.TempDir()
	m := newMeter(dir, []Class{{Name: "instances", Roots: []int{200, 201}}})
	fakeProc(t, dir, map[int]string{200: statLine(200, 1, 10, 0, 0, 0), 201: statLine(201, 1, 0, 0, 0, 0)},
		map[int]string{200: ioText(1, 1)})
	before, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	fakeProc(t, dir, map[int]string{200: statLine(200, 1, 20, 0, 0, 0), 201: statLine(201, 1, 0, 0, 0, 0)},
		map[int]string{200: ioText(9, 9)})
	after, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	w := m.Between(before, after, 10)
	if u := w.Classes[0]; u.SyscallsPerOrder != nil || u.PerOrderUs != 10000 {
		t.Errorf("got %+v, want 10000 µs an order and no system calls", u)
	}
	// No /proc/stat in this directory either: no steal figure, all cores had.
	if w.StealShare != nil || w.CoresHad(2) != 2 {
		t.Errorf("steal share %v, cores had %v; want none and 2", w.StealShare, w.CoresHad(2))
	}
}

// usages prints us with the system calls' values, not their addresses.
func usages(us []Usage) []string {
	out := make([]string, len(us))
	for i, u := range us {
		calls := "none"
		if u.SyscallsPerOrder != nil {
			calls = fmt.Sprint(*u.SyscallsPerOrder)
		}
		c := u
		c.SyscallsPerOrder = nil
		out[i] = fmt.Sprintf("%+v calls %s", c, calls)
	}
	return out
}

func TestParseListeners(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:18F7 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0
   1: 0100007F:18F7 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0885 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0
`
	got, err := parseListeners(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "map[2181:[555] 6391:[31337]]" {
		t.Errorf("got %v", got)
	}
}

// TestListenerPIDs finds this test's own listening socket in the real /proc.
func TestListenerPIDs(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system: the bench measures CPU on Linux only")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	got, err := ListenerPIDs([]int{port})
	if err != nil {
		t.Fatal(err)
	}
	if got[port] != os.Getpid() {
		t.Errorf("port %d: pid %d, want %d", port, got[port], os.Getpid())
	}
	if _, err := ListenerPIDs([]int{1}); !errors.Is(err, ErrNoListener) {
		t.Errorf("port 1: err %v, want ErrNoListener", err)
	}
}

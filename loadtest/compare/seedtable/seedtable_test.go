package seedtable

import (
	"bytes"
	"strings"
	"testing"
)

func TestFIFOStats(t *testing.T) {
	for _, tc := range []struct {
		name       string
		order      []acquisition
		shares     []float64
		violations int
	}{
		{"in order of waiting", []acquisition{{0, 1}, {1, 2}, {2, 3}, {0, 4}}, []float64{0.5, 0.25, 0.25}, 0},
		// 4 and 3 both began before 5 but acquired after it: two overtaken.
		{"two overtaken by one", []acquisition{{0, 5}, {1, 4}, {2, 3}}, []float64{1. / 3, 1. / 3, 1. / 3}, 2},
		{"releaser first again", []acquisition{{0, 1}, {0, 4}, {1, 2}, {2, 3}}, []float64{0.5, 0.25, 0.25}, 2},
		{"none", nil, []float64{0, 0, 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shares, v := fifoStats(tc.order, 3)
			if v != tc.violations {
				t.Errorf("violations %d, want %d", v, tc.violations)
			}
			for i := range shares {
				if d := shares[i] - tc.shares[i]; d > 1e-9 || d < -1e-9 {
					t.Errorf("shares %v, want %v", shares, tc.shares)
					break
				}
			}
		})
	}
}

// TestCellsSayWhyNotApplicable: every cell of a backend without a lock is
// n/a with a reason, and measured cells carry their figures.
func TestCellsSayWhyNotApplicable(t *testing.T) {
	ms := 1040.0
	none := Table{Backend: "none", HotSKU: Throughput{SKUs: 1, Orders: 10, OrdersPerS: 1500, P99Ms: 20, Damaged: true},
		ManySKUs: Throughput{SKUs: 1000, Orders: 10, OrdersPerS: 400, P99Ms: 90}}
	none.Release.NA, none.Fairness.NA, none.Availability.NA, none.Fencing.NA = "no lock", "no lock", "no lock servers", "no fencing token"
	none.CAP, none.LockTypes = FactsFor("none")
	redis := Table{Backend: "redis", HotSKU: Throughput{SKUs: 1, Orders: 10, OrdersPerS: 800, P99Ms: 200, Safe: true},
		ManySKUs: Throughput{SKUs: 1000, Orders: 10, OrdersPerS: 300, P99Ms: 500, Safe: true},
		Release:  Release{Bound: "lease TTL 1s", Ms: &ms},
		Fairness: Fairness{Lockers: 3, Acquisitions: 600, Shares: []float64{0.3, 0.4, 0.3}, FIFOViolations: 240, ViolationShare: 0.4},
		Availability: Availability{Servers: 1, Minority: &Window{NA: "1 server: no minority to lose"},
			Majority: &Window{Down: 1, Orders: 100, Share201: 0}},
		Fencing: Fencing{StaleWritesRefused: 3, OffDamaged: 40}}
	redis.CAP, redis.LockTypes = FactsFor("redis")
	grid := Grid([]Table{none, redis}, true)
	if len(grid) != 1+len(rows)+len(factRows) || grid[0][1] != "none" || grid[0][2] != "redis" {
		t.Fatalf("grid head %v, %d lines", grid[0], len(grid))
	}
	for _, line := range grid[1 : 1+len(rows)] {
		if line[0] != rows[0].label && line[0] != rows[1].label && !strings.HasPrefix(line[1], "n/a: ") {
			t.Errorf("none %q: %q, want n/a with a reason", line[0], line[1])
		}
		if strings.HasPrefix(line[2], "n/a") && !strings.Contains(line[0], "minority") {
			t.Errorf("redis %q: %q", line[0], line[2])
		}
	}
	var buf bytes.Buffer
	Print(&buf, []Table{none, redis}, DefaultSettings())
	for _, want := range []string{"800/s, p99 200 ms", "1.04 s (lease TTL 1s)", "30/40/30% of 600", "240 (40%)",
		"n/a: 1 server: no minority to lose", "0% of 100 (1 of 1 down)", "3 refused, 0 damaged", "40 units", "(damaged)", "AP-ish"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("terminal table lacks %q:\n%s", want, buf.String())
		}
	}
	if f := redis.Failures(); len(f) != 0 {
		t.Errorf("failures of a clean column: %v", f)
	}
	redis.Fencing.OnDamaged = 2
	if f := redis.Failures(); len(f) != 1 {
		t.Errorf("fencing on with damage: failures %v", f)
	}
	// The fencing-off run's error hides neither the failure nor the damage.
	redis.Fencing.Error = "fencing off: fault: SIGSTOP: no such process"
	if f := redis.Failures(); len(f) != 1 || !strings.Contains(redis.Fencing.onCell(), "2 damaged") {
		t.Errorf("fencing on with damage, fencing off failed: failures %v, cell %q", f, redis.Fencing.onCell())
	}
	redis.Fencing = Fencing{OnFailures: []string{"1 order unresolved"}}
	if f := redis.Failures(); len(f) != 1 {
		t.Errorf("fencing on that did not pass: failures %v", f)
	}
	// Inconclusive is neither safe nor damaged: a failure, not damage.
	redis.Fencing = Fencing{}
	redis.ManySKUs.Safe = false
	if f := redis.Failures(); len(f) != 1 || !strings.Contains(f[0], "inconclusive") || redis.Damaged() || !strings.Contains(redis.ManySKUs.cell(), "(inconclusive)") {
		t.Errorf("inconclusive 1,000-SKU run: failures %v, damaged %v, cell %q", f, redis.Damaged(), redis.ManySKUs.cell())
	}
	redis.ManySKUs.Damaged = true
	if f := redis.Failures(); len(f) != 1 || !strings.Contains(f[0], "oversold or lost") || !redis.Damaged() {
		t.Errorf("damaged 1,000-SKU run: failures %v, damaged %v", f, redis.Damaged())
	}
	redis.ManySKUs.Safe, redis.ManySKUs.Damaged = true, false
	// A throughput run that failed proved nothing safe.
	redis.HotSKU.Error = "verify: audit: connection refused"
	if f := redis.Failures(); len(f) != 1 {
		t.Errorf("a failed hot-SKU run: failures %v", f)
	}
}

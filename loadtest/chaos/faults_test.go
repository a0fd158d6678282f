package chaos

import (
	"slices"
	"testing"
	"time"
)

// The database, clock and nemesis scenarios, bounded like the others. Each
// fenced run must keep its recorded history clean; each unfenced race must
// show damage the checker or the verification reports.

func requireHistory(t *testing.T, r Run) *HistoryCheck {
	t.Helper()
	h := r.History
	if h == nil {
		t.Fatal("no history checked")
	}
	t.Logf("history: %d operations (%d ok, %d failed, %d unknown), %d retries, %d store_unavailable, checked in %.0f ms: %s",
		h.Operations, h.OK, h.Failed, h.Unknown, h.Retries, h.StoreUnavailable, h.CheckMs, h.Report)
	if h.Operations == 0 {
		t.Fatal("the recorded clients made no operation")
	}
	return h
}

func TestChaosPostgresRestart(t *testing.T) {
	r := chaosTest(t, "postgres-restart", "redis", "on")
	h := requireHistory(t, r)
	requirePass(t, r)
	if h.StoreUnavailable == 0 && r.Orders.ErrorCodes["store_unavailable"] == 0 {
		t.Fatal("no 503 store_unavailable while Postgres was down")
	}
	if h.Internal != 0 || h.NoRetryAfter != 0 || h.DoubledKeys != 0 || len(h.Violations) != 0 {
		t.Fatalf("500s %d, 503s without Retry-After %d, doubled keys %d, violations %v", h.Internal, h.NoRetryAfter, h.DoubledKeys, h.Violations)
	}
}

func TestChaosLostCommitAck(t *testing.T) {
	r := chaosTest(t, "lost-commit-ack", "redis", "on")
	h := requireHistory(t, r)
	requirePass(t, r)
	la := h.LostAcks
	if la == nil || la.Rounds != lostAckRounds || la.Dropped != la.Rounds || la.Committed != la.Dropped ||
		la.Replayed != la.Rounds || la.OrdersPerKey != 1 {
		t.Fatalf("lost acks %+v: want every round committed behind a dropped answer and replayed, one order per key", la)
	}
}

func TestChaosRedisClockJumpFencingOn(t *testing.T) {
	r := chaosTest(t, "redis-clock-jump", "redis", "on")
	requirePass(t, r)
	if r.StaleWritesRejected < 1 {
		t.Fatalf("stale writes rejected %d, want >= 1", r.StaleWritesRejected)
	}
}

func TestChaosRedisClockJumpFencingOff(t *testing.T) {
	r := chaosTest(t, "redis-clock-jump", "redis", "off")
	requirePass(t, r)
	if r.Units.Oversold+r.Units.Lost == 0 {
		t.Fatal("fencing off: no unit oversold or lost after the clock jump")
	}
}

// nemesisTest is a short nemesis (total of faults): the schedule still
// holds the forced pause, and its seed is the first from 20260101 whose
// schedule also partitions, so that the bounded run always cuts a link.
func nemesisTest(t *testing.T, backend, fencing string, total time.Duration) Run {
	t.Helper()
	w := nemesisWorld{backend: backend, instances: DefaultConfig().Instances, locks: 5, skus: histSKUs}
	expiry := defaultLockTTL
	if backend == "zookeeper" {
		w.locks, expiry = 3, zkSessionTimeout
	}
	seed := uint64(20260101)
	for !slices.ContainsFunc(nemesisSchedule(seed, total, pastExpiry(expiry), w), func(s nemesisStep) bool {
		return s.Kind == nemCutInstance || s.Kind == nemCutMinority || s.Kind == nemCutLeader
	}) {
		seed++
	}
	return chaosTest(t, "nemesis", backend, fencing, func(cc *Config) { cc.NemesisDuration, cc.Seed = total, seed })
}

func TestChaosNemesisFencingOn(t *testing.T) {
	r := nemesisTest(t, "redlock", "on", 8*time.Second)
	h := requireHistory(t, r)
	requirePass(t, r)
	if len(h.Violations) != 0 || len(h.Undecided) != 0 {
		t.Fatalf("fencing on: %d violations, %d SKUs undecided", len(h.Violations), len(h.Undecided))
	}
}

func TestChaosNemesisFencingOff(t *testing.T) {
	r := nemesisTest(t, "redlock", "off", 8*time.Second)
	h := requireHistory(t, r)
	requirePass(t, r)
	if len(h.Violations) == 0 {
		t.Fatal("fencing off: the history checker found no violation")
	}
}

// TestNemesisScheduleReproducible: a seed replays its schedule, which holds
// exactly one forced pause, at most one Postgres restart, only faults the
// backend's world can take, and fits the run; across seeds every kind of
// partition is drawn.
func TestNemesisScheduleReproducible(t *testing.T) {
	const total, holder = 60 * time.Second, 2 * time.Second
	redlock := nemesisWorld{backend: "redlock", instances: 3, locks: 5, skus: 3}
	zk := nemesisWorld{backend: "zookeeper", instances: 3, locks: 3, skus: 3}
	for _, w := range []nemesisWorld{redlock, zk} {
		drawn := map[string]bool{}
		for seed := uint64(1); seed <= 200; seed++ {
			a := nemesisSchedule(seed, total, holder, w)
			if b := nemesisSchedule(seed, total, holder, w); !slices.Equal(a, b) {
				t.Fatalf("%s seed %d: two schedules differ:\n%v\n%v", w.backend, seed, a, b)
			}
			var at time.Duration
			forced, restarts := 0, 0
			for _, s := range a {
				at += s.Gap + s.For
				drawn[s.Kind] = true
				switch s.Kind {
				case nemPauseHolder:
					forced++
				case nemPostgres:
					restarts++
				}
				if s.Kind != nemPauseHolder && !slices.Contains(w.kinds(), s.Kind) {
					t.Fatalf("%s seed %d: drew %s, not a fault of this world", w.backend, seed, s.Kind)
				}
			}
			if forced != 1 || restarts > 1 || at > total+holder+1200*time.Millisecond {
				t.Fatalf("%s seed %d: %d forced pauses, %d restarts, %v of faults: %v", w.backend, seed, forced, restarts, at, a)
			}
		}
		for _, k := range w.kinds() {
			if !drawn[k] {
				t.Errorf("%s: %s never drawn in 200 seeds", w.backend, k)
			}
		}
	}
	if slices.Contains(zk.kinds(), nemClockJump) || slices.Contains(zk.kinds(), nemCutMinority) || slices.Contains(redlock.kinds(), nemCutLeader) {
		t.Fatalf("kinds: zookeeper %v, redlock %v", zk.kinds(), redlock.kinds())
	}
	if slices.Equal(nemesisSchedule(1, total, holder, redlock), nemesisSchedule(2, total, holder, redlock)) {
		t.Fatal("seeds 1 and 2 drew the same schedule")
	}
	short := nemesisSchedule(7, time.Second, holder, redlock)
	if len(short) != 1 || short[0].Kind != nemPauseHolder {
		t.Fatalf("a run too short for any step still gets the forced pause alone, got %v", short)
	}
}

package chaos

import "testing"

func TestChaosEtcdKillMember(t *testing.T) {
	r := chaosTest(t, "kill-etcd-member", "etcd", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Units.Lost != 0 || r.Fault.ReservedDuring == 0 {
		t.Fatalf("%d oversold, %d lost, %d orders reserved while a follower was down", r.Units.Oversold, r.Units.Lost, r.Fault.ReservedDuring)
	}
}

func TestChaosEtcdKillLeader(t *testing.T) {
	r := chaosTest(t, "kill-etcd-leader", "etcd", "on")
	requirePass(t, r)
	if r.Units.Oversold != 0 || r.Units.Lost != 0 || r.RecoveryMs == nil {
		t.Fatalf("%d oversold, %d lost, recovery %v", r.Units.Oversold, r.Units.Lost, r.RecoveryMs)
	}
	t.Logf("first 201 %.0f ms after the new leader was elected", *r.RecoveryMs)
}

// TestChaosEtcdPauseHolder: a frozen instance's session lease runs out, a
// newer holder's create revision is the higher token, and the store refuses
// the frozen holder's write with fencing on (and lets it damage with it
// off: TestChaosEtcdPauseHolderFencingOff).
func TestChaosEtcdPauseHolder(t *testing.T) {
	on := chaosTest(t, "pause-holder", "etcd", "on")
	requirePass(t, on)
	if on.Units.Oversold != 0 || on.Units.Lost != 0 || on.StaleWritesRejected < 1 {
		t.Fatalf("fencing on: %d oversold, %d lost, %d stale writes rejected", on.Units.Oversold, on.Units.Lost, on.StaleWritesRejected)
	}
}

func TestChaosEtcdPauseHolderFencingOff(t *testing.T) {
	off := chaosTest(t, "pause-holder", "etcd", "off")
	requirePass(t, off)
	if off.Units.Oversold+off.Units.Lost == 0 {
		t.Fatal("fencing off: no unit oversold or lost")
	}
}

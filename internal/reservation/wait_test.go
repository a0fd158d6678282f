package reservation

import "testing"

// TestLeaveCountsOutOfTheNewWait: an order taken, still queued, into a
// leader's new lock wait drops and counts itself out before the wait is
// made; it then held the leader's earlier wait, which it left. It is
// counted out of the new wait too: as the last order waiting, the wait is
// cancelled, not run to that order's deadline.
func TestLeaveCountsOutOfTheNewWait(t *testing.T) {
	p := &pending{}
	earlier := &lockWait{cancel: func(error) {}}
	earlier.waitFor([]*pending{p})
	// The earlier wait ended with p still queued; the leader takes p for its
	// next one, and p drops before that wait is made.
	p.move(stateQueued, stateDropped)
	p.leave()
	cancelled := false
	next := &lockWait{cancel: func(error) { cancelled = true }}
	next.waitFor([]*pending{p})
	if !cancelled {
		t.Fatalf("a lock wait whose only order had dropped was not cancelled (%d counted waiting)", next.waiting.Load())
	}
}

package reservation

import (
	"testing"
	"time"
)

// TestStoreCallsBehind: a wait is behind the store when a call still in
// progress began before it, whichever calls began or ended since (several
// gatherers share one storeCalls): a later call's start must not hide an
// older one still running, nor an older one's end leave a later one's
// wait blamed on the store.
func TestStoreCallsBehind(t *testing.T) {
	var sc storeCalls
	a := sc.enter() // a claim that hangs
	time.Sleep(2 * time.Millisecond)
	since := time.Now() // an order's wait begins
	time.Sleep(2 * time.Millisecond)
	b := sc.enter() // a quick write meanwhile
	sc.leave(b)
	if !sc.behind(since) {
		t.Error("the whole wait behind a call still in progress: behind = false")
	}
	c := sc.enter() // a call begun after the wait, still running
	sc.leave(a)
	if sc.behind(since) {
		t.Error("only a call begun after the wait is in progress: behind = true")
	}
	sc.leave(c)
	if sc.behind(since) {
		t.Error("no call in progress: behind = true")
	}
}

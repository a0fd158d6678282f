package redisnode

import (
	"context"
	"errors"
	"sync"
	"time"
)

var errReplies = errors.New("release script: wrong number of replies")

// settling is the deletes of a Node that a Release could not confirm, going
// on in the background: at most one goroutine per Node, sending the pending
// holds (up to settleChunk a call) in one script call, again and again,
// until each is confirmed as Release counts answers, given up, or the Node
// closed. Close stops it; it is the only thing that outlives the calls
// that started it.
type settling struct {
	ctx  context.Context // cancelled by Close
	stop context.CancelFunc

	mu      sync.Mutex
	queue   []settle
	flying  int // holds of the call in flight, out of queue
	running bool
	closed  bool
	wg      sync.WaitGroup
}

// settle is one hold whose delete is not confirmed yet.
type settle struct {
	hold  Hold
	wake  Wake
	need  uint8     // answered deletes still needed (see Release)
	until time.Time // given up then
}

// Bounds of the background deletes.
//
// settleTTLs: a hold is given up settleTTLs of its TTL after it was handed
// over, if the node has not confirmed its delete by then. That is safe, and
// only costs time: a stray lock key holds a lease id no lease has any more
// (released, or never granted), so it keeps the key's next holder waiting,
// at most one TTL after it lands, and never lets two hold it. And it is
// seldom even that. A node that has not answered for several TTLs was down
// or is gone: a restart without persistence (the Redlock set-up) starts
// empty, and a write still buffered in a killed server died with it; a
// write that did run there has expired by now unless the server was frozen
// the whole time and runs it only when it wakes, which no bound can
// foresee. A node that does answer confirms within two calls.
//
// settleChunk bounds one call's holds; maxSettle the holds kept per node
// (beyond it the oldest, the likeliest to be lost or expired, are dropped);
// settleMaxPause the pause between failed calls, which double from
// releasePause: a frozen node costs a failed call (a dial, a node timeout)
// a quarter of a second, and a stray key lasts at most that long after
// the node comes back.
const (
	settleTTLs     = 4
	settleChunk    = 256
	maxSettle      = 1 << 16
	settleMaxPause = 250 * time.Millisecond
)

// add hands holds over to the background, each needing need[i] more
// answered deletes (need nil: one each; 0: none).
func (s *settling) add(n *Node, holds []Hold, wake []Wake, need []uint8, ttl time.Duration) {
	until := time.Now().Add(settleTTLs * max(ttl, time.Second))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for i, h := range holds {
		more := uint8(1)
		if need != nil {
			more = need[i]
		}
		if more > 0 {
			s.queue = append(s.queue, settle{hold: h, wake: wakeAt(wake, i), need: more, until: until})
		}
	}
	if over := len(s.queue) - maxSettle; over > 0 {
		s.queue = append(s.queue[:0], s.queue[over:]...)
	}
	if !s.running && len(s.queue) > 0 {
		s.running = true
		s.wg.Add(1)
		go s.run(n)
	}
}

// run sends the pending deletes until none is left.
func (s *settling) run(n *Node) {
	defer s.wg.Done()
	pause := releasePause
	for {
		batch := s.take()
		if batch == nil {
			return
		}
		err := n.settleOnce(s.ctx, batch)
		s.putBack(batch)
		if err == nil {
			pause = releasePause
			continue // what still needs an answer is sent at once: after this one's
		}
		pause = min(2*pause, settleMaxPause)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// take removes the next call's holds from the queue, dropping those given
// up; nil (and the goroutine ends) when there are none.
func (s *settling) take() []settle {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.queue[:0]
	for _, e := range s.queue {
		if now.Before(e.until) {
			live = append(live, e)
		}
	}
	clear(s.queue[len(live):])
	s.queue = live
	if s.closed || len(s.queue) == 0 {
		s.queue = nil // an outage's backlog may have grown it: let it go
		s.running = false
		return nil
	}
	k := min(len(s.queue), settleChunk)
	batch := append([]settle(nil), s.queue[:k]...)
	s.queue = append(s.queue[:0], s.queue[k:]...)
	s.flying = k
	return batch
}

// putBack queues again the holds of batch that still need an answer.
func (s *settling) putBack(batch []settle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flying = 0
	if s.closed {
		return
	}
	for _, e := range batch {
		if e.need > 0 {
			s.queue = append(s.queue, e)
		}
	}
}

func (s *settling) close() {
	s.mu.Lock()
	s.closed, s.queue = true, nil
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}

func (s *settling) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) + s.flying
}

// settleOnce sends one delete for every hold of batch and counts its answer
// (see Release); a failure that no repeat can mend (an error reply other
// than a notRun one, a closed Node) gives them up.
func (n *Node) settleOnce(ctx context.Context, batch []settle) error {
	holds, wake := make([]Hold, len(batch)), make([]Wake, len(batch))
	var last time.Time // no call for these holds comes after it
	for i, e := range batch {
		holds[i], wake[i] = e.hold, e.wake
		if e.until.After(last) {
			last = e.until
		}
	}
	keys, argv := releaseArgs(holds, wake, time.Until(last)+time.Second)
	rctx, cancel := n.ctx(ctx)
	v, err := releaseScript.Run(rctx, n.c, keys, argv...).Int64Slice()
	cancel()
	if err == nil && len(v) != 1+len(batch) {
		err = errReplies
	}
	if err != nil {
		if !retryable(err) || err == errReplies {
			for i := range batch {
				batch[i].need = 0
			}
		}
		return err
	}
	for i := range batch {
		// This call woke whom it should: a repeat (an Unknown write's
		// confirming delete) that woke again would send a second waiter
		// into the lock, as in Release's own loop.
		batch[i].wake = WakeNone
		switch e := &batch[i]; {
		case v[i+1]&2 != 0:
			e.need = 0
		default:
			e.need--
		}
	}
	return nil
}

// Settling is how many holds' deletes go on in the background (see
// Release), for tests and diagnostics.
func (n *Node) Settling() int { return n.bg.len() }

package reservation

import (
	"context"
	"time"
)

// Queued returns how many orders wait, undecided and not yet in a batch, in
// the queue of sku (their lowest SKU): tests wait on it to order arrivals.
func Queued(s *Service, sku string) int {
	c := s.coalesce
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[sku]
	if q == nil {
		return 0
	}
	n := 0
	for _, p := range q.items {
		if p.state.Load() == stateQueued {
			n++
		}
	}
	return n
}

// MaxRewrites is maxRewrites, for the tests of a batch's isolation.
const MaxRewrites = maxRewrites

// Gathering returns how many orders wait in the intake for a gatherer.
func Gathering(s *Service) int {
	c := s.coalesce
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.intake {
		if p.state.Load() == stateQueued {
			n++
		}
	}
	return n
}

// Leading reports whether a batch leader serves sku's queue.
func Leading(s *Service, sku string) bool {
	c := s.coalesce
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.queues[sku]
	return ok
}

// Filling reports the gatherers waiting for the intake to fill their next
// batch.
func Filling(s *Service) int {
	c := s.coalesce
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.filled)
}

// NewReaper returns one pass of a reaper of s (Reap's work on each tick),
// keeping its memory of failures across calls as Reap does.
func NewReaper(s *Service, interval time.Duration) func(context.Context) {
	return newReaper(s, interval).once
}

// LineLinger is lineLinger, for the test of an emptied queue.
const LineLinger = lineLinger

// Closing reports whether Close has begun on s.
func Closing(s *Service) bool { return s.life.closing() }

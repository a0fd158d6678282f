// Package keyqueue lines up the goroutines of one process that want the same
// key, first come first served, so that only the head of each line polls
// Redis for the lock.
//
// Without it every waiting goroutine polls on its own: a hot key in one
// service instance turns into dozens of SET NX rounds per retry delay, the
// rounds of one Redlock attempt split the nodes' votes between them so that
// nobody wins, and the goroutine that just released the key wins it back
// before the sleeping ones wake (barging). With it, a process is one
// contender per key, and its goroutines get the lock in arrival order.
// Between processes there is no line: a release wakes the waiter blocked
// longest in its current pause, not the one that began to wait first.
package keyqueue

import (
	"context"
	"errors"
	"sync"
)

// ErrBusy is Wait's error with tryOnce when another goroutine is at the head
// of the line (holding the key or acquiring it).
var ErrBusy = errors.New("another goroutine of this process holds or is acquiring the key")

// Queue holds one line per key that has a holder or a waiter. The zero value
// is not usable; call New.
type Queue struct {
	mu    sync.Mutex
	lines map[string]*line
}

// line is a one-slot channel: the goroutine whose send succeeded is at the
// head. Blocked senders are queued by the runtime in arrival order, and a
// receive hands the slot straight to the first of them, so nobody can barge.
type line struct {
	slot chan struct{}
	refs int // the head and the waiters; the line is dropped at zero
}

// New returns an empty Queue.
func New() *Queue { return &Queue{lines: make(map[string]*line)} }

// Wait returns once the caller is at the head of key's line, or ctx's error,
// or ErrBusy at once with tryOnce when the head is taken. done gives the head
// up to the next in line; it may be called more than once.
func (q *Queue) Wait(ctx context.Context, key string, tryOnce bool) (done func(), err error) {
	l := q.ref(key)
	select {
	case l.slot <- struct{}{}:
	default:
		if tryOnce {
			q.unref(key)
			return nil, ErrBusy
		}
		select {
		case l.slot <- struct{}{}:
		case <-ctx.Done():
			q.unref(key)
			return nil, ctx.Err()
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-l.slot
			q.unref(key)
		})
	}, nil
}

func (q *Queue) ref(key string) *line {
	q.mu.Lock()
	defer q.mu.Unlock()
	l, ok := q.lines[key]
	if !ok {
		l = &line{slot: make(chan struct{}, 1)}
		q.lines[key] = l
	}
	l.refs++
	return l
}

func (q *Queue) unref(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lines[key]
	if l.refs--; l.refs == 0 {
		delete(q.lines, key)
	}
}

package retry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/keyqueue"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
)

// Grab is one batch attempt at keys (sorted, unique, each at the head of
// this Locker's line): one round per server per phase for all of them. It
// returns a lease per key, aligned with keys, nil where the key is held
// elsewhere; each lease owns its key's turn (turns[i]) and gives it up when
// released or lost. On error nothing may be left held, on any server.
type Grab func(ctx context.Context, keys []string, o lock.Options, turns []func()) ([]*lock.Lease, error)

// AcquireBatch implements the body of lock.Locker.AcquireBatch.
//
// The in-process lines rule: a key whose line in this Locker is busy —
// another goroutine holds it, is acquiring it or waits for it — counts as
// held and is not sent to the servers. A batch never overtakes a goroutine
// already in a key's line, and a process stays one contender per key; the
// caller waits for such a key in its line with Acquire, like any held key.
func (lp *Loop) AcquireBatch(ctx context.Context, keys []string, opts []lock.Option, grab Grab) (lock.Batch, error) {
	begin := time.Now()
	sorted, err := lock.BatchKeys(keys)
	if err != nil {
		lp.Metrics.Failed(lockmetrics.ReasonInvalidKey)
		return lock.Batch{}, fmt.Errorf("%s: batch: %w", lp.Name, err)
	}
	o := lock.Apply(lp.DefaultTTL, opts)
	if o.TTL < time.Millisecond {
		return lock.Batch{}, fmt.Errorf("%s: batch: TTL %v below Redis's 1ms resolution", lp.Name, o.TTL)
	}
	if err := ctx.Err(); err != nil {
		lp.failed(len(sorted), err)
		return lock.Batch{}, fmt.Errorf("%s: batch of %d keys: %w", lp.Name, len(sorted), err)
	}
	var b lock.Batch
	mine := make([]string, 0, len(sorted))
	turns := make([]func(), 0, len(sorted))
	for _, k := range sorted {
		turn, err := lp.Queue.Wait(ctx, k, true)
		if errors.Is(err, keyqueue.ErrBusy) {
			b.Held = append(b.Held, k)
			continue
		}
		if err != nil { // tryOnce waits for nothing; a defensive bound
			releaseTurns(turns)
			lp.failed(len(sorted), err)
			return lock.Batch{}, fmt.Errorf("%s: batch of %d keys: %w", lp.Name, len(sorted), err)
		}
		mine = append(mine, k)
		turns = append(turns, turn)
	}
	if len(mine) > 0 {
		// The leases' turns note their release, as Acquire's do: the next
		// local Acquire of the key then yields to the waiter elsewhere that
		// the release woke. turns stays raw for the keys not obtained,
		// which this Locker never held.
		owned := make([]func(), len(mine))
		for i, k := range mine {
			owned[i] = lp.noteRelease(k, turns[i])
		}
		lp.Metrics.Attempt()
		leases, err := grab(ctx, mine, o, owned)
		if err != nil {
			releaseTurns(turns)
			lp.failed(len(sorted), err)
			return lock.Batch{}, fmt.Errorf("%s: batch of %d keys: %w", lp.Name, len(sorted), err)
		}
		for i, lease := range leases {
			if lease == nil {
				turns[i]()
				b.Held = append(b.Held, mine[i])
				continue
			}
			b.Leases = append(b.Leases, lease)
		}
	}
	slices.Sort(b.Held)
	took := time.Since(begin)
	for range b.Leases {
		lp.Metrics.Acquired(took)
	}
	for range b.Held {
		lp.Metrics.Failed(lockmetrics.ReasonNotAcquired)
	}
	return b, nil
}

func (lp *Loop) failed(keys int, err error) {
	for range keys {
		lp.Metrics.Failed(lockmetrics.Reason(err))
	}
}

func releaseTurns(turns []func()) {
	for _, t := range turns {
		t()
	}
}

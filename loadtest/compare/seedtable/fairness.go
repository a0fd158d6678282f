package seedtable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/backends"
)

// Fairness load: three Lockers, as three instances hold them, each with
// fairGoroutines waiting for the key in a loop and holding it fairHold.
const (
	fairLockers    = 3
	fairGoroutines = 4
	fairHold       = time.Millisecond
)

// acquisition is one lease obtained in the fairness run: which Locker got
// it, and the global order in which its wait began.
type acquisition struct {
	locker int
	began  uint64
}

// MeasureFairness makes fairLockers Lockers of the backend (from the
// backends table, with p's servers and a fresh Prometheus registry each)
// contend for one fresh key for d, and counts each one's share of the
// acquisitions and the acquisitions overtaken by a later waiter.
//
// A wait's beginning is numbered from one counter just before Acquire is
// called; acquisitions are recorded while the lease is held, so their
// order is the lock's own order. Acquisition i is a FIFO violation when an
// acquisition before it began waiting after i did.
func MeasureFairness(ctx context.Context, backend string, p backends.Params, d time.Duration) Fairness {
	b, err := backends.Lookup(backend)
	if err != nil {
		return Fairness{Error: err.Error()}
	}
	switch {
	case backend == "none":
		return Fairness{NA: naNoLock}
	case !b.Distributed:
		return Fairness{NA: naInProcess}
	}
	p.Logger = slog.New(slog.DiscardHandler)
	lockers := make([]lock.Locker, 0, fairLockers)
	defer func() {
		for _, l := range lockers {
			_ = l.Close()
		}
	}()
	for range fairLockers {
		p.Registerer = prometheus.NewRegistry()
		l, err := b.New(ctx, p)
		if err != nil {
			return Fairness{Error: fmt.Sprintf("locker: %v", err)}
		}
		lockers = append(lockers, l)
	}
	key := "seedfair-" + uuid.NewString()[:13]
	var (
		seq     atomic.Uint64
		mu      sync.Mutex
		order   []acquisition
		errs    []error
		wg      sync.WaitGroup
		runCtx  context.Context
		stopRun context.CancelFunc
	)
	runCtx, stopRun = context.WithTimeout(ctx, d)
	defer stopRun()
	for li, l := range lockers {
		for range fairGoroutines {
			wg.Go(func() {
				for runCtx.Err() == nil {
					began := seq.Add(1)
					lease, err := l.Acquire(runCtx, key)
					if err != nil {
						if runCtx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
						continue
					}
					mu.Lock()
					order = append(order, acquisition{locker: li, began: began})
					mu.Unlock()
					time.Sleep(fairHold)
					rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_ = lease.Release(rctx)
					cancel()
				}
			})
		}
	}
	wg.Wait()
	out := Fairness{Lockers: fairLockers, Goroutines: fairGoroutines, Acquisitions: len(order)}
	if len(order) == 0 {
		out.Error = fmt.Sprintf("no acquisition in %v: %v", d, errors.Join(errs...))
		return out
	}
	out.Shares, out.FIFOViolations = fifoStats(order, fairLockers)
	out.ViolationShare = float64(out.FIFOViolations) / float64(len(order))
	return out
}

// fifoStats reads acquisitions in the order they happened: each Locker's
// share, and how many were overtaken by one that began waiting later.
func fifoStats(order []acquisition, lockers int) (shares []float64, violations int) {
	counts := make([]int, lockers)
	var latest uint64
	for _, a := range order {
		counts[a.locker]++
		if latest > a.began {
			violations++
		}
		latest = max(latest, a.began)
	}
	for _, c := range counts {
		shares = append(shares, float64(c)/float64(max(1, len(order))))
	}
	return shares, violations
}

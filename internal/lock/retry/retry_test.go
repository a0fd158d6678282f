package retry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/keyqueue"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
)

func newLoop(t *testing.T) *Loop {
	m, err := lockmetrics.New(nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	return &Loop{Name: "test", Queue: keyqueue.New(), Metrics: m, Log: slog.New(slog.DiscardHandler),
		DefaultTTL: time.Second, RetryDelay: time.Millisecond}
}

// attempts answers each try with the next error, then grants.
func attempts(errs ...error) (Attempt, *int) {
	n := 0
	return func(_ context.Context, key string, o lock.Options, turn func()) (*lock.Lease, error) {
		n++
		if n <= len(errs) {
			return nil, errs[n-1]
		}
		l, _ := lock.NewLease(lock.LeaseParams{Key: key, Handle: releaser(turn)})
		return l, nil
	}, &n
}

type releaser func()

func (r releaser) Release(context.Context) error { r(); return nil }

func TestLoop(t *testing.T) {
	held := fmt.Errorf("held: %w", lock.ErrNotAcquired)
	down := fmt.Errorf("down: %w", lock.ErrUnavailable)
	cases := []struct {
		name  string
		errs  []error
		opts  []lock.Option
		want  error // nil: granted
		tries int
	}{
		{"granted after two held rounds", []error{held, held}, nil, nil, 3},
		{"try once on a held key", []error{held}, []lock.Option{lock.TryOnce()}, lock.ErrNotAcquired, 1},
		{"unreachable gives up", []error{down, down, down, down}, nil, lock.ErrUnavailable, MaxUnavailable},
		{"one unreachable round is retried", []error{down, held, down}, nil, nil, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			try, n := attempts(c.errs...)
			lease, err := newLoop(t).Acquire(context.Background(), "k", c.opts, try)
			if !errors.Is(err, c.want) || (c.want == nil) != (lease != nil) || *n != c.tries {
				t.Fatalf("Acquire = %v, %v after %d tries; want %v after %d", lease, err, *n, c.want, c.tries)
			}
			if lease != nil {
				_ = lease.Release(context.Background())
			}
		})
	}
}

func TestLoopHonoursContextAndKey(t *testing.T) {
	lp := newLoop(t)
	try, _ := attempts()
	if _, err := lp.Acquire(context.Background(), "", nil, try); !errors.Is(err, lock.ErrInvalidKey) {
		t.Fatalf("empty key = %v", err)
	}
	held := fmt.Errorf("held: %w", lock.ErrNotAcquired)
	forever := func(context.Context, string, lock.Options, func()) (*lock.Lease, error) { return nil, held }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := lp.Acquire(ctx, "k", nil, forever)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Acquire past the deadline = %v, want DeadlineExceeded with the last attempt's cause", err)
	}
	// The failed waiter gave its turn back: the key's line is free.
	try, _ = attempts()
	lease, err := lp.Acquire(context.Background(), "k", []lock.Option{lock.TryOnce()}, try)
	if err != nil {
		t.Fatalf("turn not given back: %v", err)
	}
	_ = lease.Release(context.Background())
}

func TestJitter(t *testing.T) {
	for range 1000 {
		if d := Jitter(10 * time.Millisecond); d < 5*time.Millisecond || d >= 15*time.Millisecond {
			t.Fatalf("Jitter(10ms) = %v, outside [5ms, 15ms)", d)
		}
	}
	if Jitter(0) != 0 {
		t.Fatal("Jitter(0) != 0")
	}
}

// TestPauseAwaits: between attempts the loop awaits the key's release for
// AwaitSpan times the delay it drew; an Await that could not wait leaves
// the rest of that one delay to be slept.
func TestPauseAwaits(t *testing.T) {
	held := fmt.Errorf("held: %w", lock.ErrNotAcquired)
	for _, c := range []struct {
		name string
		err  error
	}{{"woken", nil}, {"could not wait", errors.New("node down")}} {
		t.Run(c.name, func(t *testing.T) {
			lp := newLoop(t)
			lp.RetryDelay = time.Hour // only Await can end a pause this test waits for
			var awaited []time.Duration
			lp.Await = func(_ context.Context, key string, d time.Duration) error {
				if key != "k" {
					t.Errorf("Await(%q)", key)
				}
				awaited = append(awaited, d)
				return c.err
			}
			try, n := attempts(held, held)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			lease, err := lp.Acquire(ctx, "k", nil, try)
			if c.err != nil {
				// The rest of an hour's pause is slept: the deadline ends it.
				if !errors.Is(err, context.DeadlineExceeded) || *n != 1 || len(awaited) != 1 {
					t.Fatalf("Acquire = %v after %d tries, %d awaits; want the deadline after 1 and 1", err, *n, len(awaited))
				}
				return
			}
			if err != nil || *n != 3 || len(awaited) != 2 {
				t.Fatalf("Acquire = %v after %d tries, %d awaits; want granted on the 3rd after 2", err, *n, len(awaited))
			}
			for _, d := range awaited {
				if d < AwaitSpan*30*time.Minute || d >= AwaitSpan*90*time.Minute {
					t.Fatalf("awaited %v: want AwaitSpan jittered delays", d)
				}
			}
			_ = lease.Release(context.Background())
		})
	}
}

// TestSplitVotePausesAShortDelay: after a refusal by a holder the loop
// awaits its release for AwaitSpan delays; after a split vote (ErrSplit)
// nobody may hold the key to wake anyone, so it sleeps a delay over
// SplitShare, without awaiting: an await would end only at its timeout,
// which a Redis server keeps only to its event loop's next wake-up.
func TestSplitVotePausesAShortDelay(t *testing.T) {
	lp := newLoop(t)
	lp.RetryDelay = 40 * time.Millisecond // jittered: 20–60 ms, over SplitShare 5–15 ms
	var awaited []time.Duration
	lp.Await = func(_ context.Context, _ string, d time.Duration) error {
		awaited = append(awaited, d)
		return nil
	}
	held := fmt.Errorf("held: %w", lock.ErrNotAcquired)
	split := fmt.Errorf("no quorum (2/5): %w: %w", lock.ErrNotAcquired, ErrSplit)
	try, _ := attempts(held, split)
	start := time.Now()
	lease, err := lp.Acquire(context.Background(), "k", nil, try)
	took := time.Since(start)
	if err != nil || len(awaited) != 1 {
		t.Fatalf("Acquire = %v after %d awaits, want granted after 1 (the holder's refusal only)", err, len(awaited))
	}
	_ = lease.Release(context.Background())
	if awaited[0] < AwaitSpan*20*time.Millisecond || awaited[0] >= AwaitSpan*60*time.Millisecond {
		t.Errorf("awaited %v after a holder's refusal, want AwaitSpan jittered delays", awaited[0])
	}
	if took < 5*time.Millisecond {
		t.Errorf("Acquire took %v: the split's pause was not slept (want at least 5 ms)", took)
	}
}

// TestYieldsAfterOwnRelease: an Acquire of a key a lease of this Loop let
// go of within RetryDelay awaits a wake-up before its first attempt (the
// woken waiter elsewhere goes first); a key not let go of lately, a later
// Acquire, and a try are attempted at once.
func TestYieldsAfterOwnRelease(t *testing.T) {
	lp := newLoop(t)
	lp.RetryDelay = time.Hour // "lately" covers the whole test
	awaits := 0
	lp.Await = func(context.Context, string, time.Duration) error { awaits++; return nil }
	acquire := func(key string, opts ...lock.Option) *lock.Lease {
		t.Helper()
		try, _ := attempts()
		lease, err := lp.Acquire(context.Background(), key, opts, try)
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	for _, c := range []struct {
		name  string
		key   string
		opts  []lock.Option
		waits int
	}{
		{"a fresh key", "k", nil, 0},
		{"just let go of", "k", nil, 1},
		{"another key", "j", nil, 0},
		{"just let go of, once more", "k", nil, 1},
		{"a try", "k", []lock.Option{lock.TryOnce()}, 0},
	} {
		before := awaits
		lease := acquire(c.key, c.opts...)
		if got := awaits - before; got != c.waits {
			t.Errorf("%s: %d awaits before the attempt, want %d", c.name, got, c.waits)
		}
		_ = lease.Release(context.Background())
	}
	// A key let go of longer than RetryDelay ago is attempted at once.
	lp.RetryDelay = 0 // nothing is "lately" any more
	before := awaits
	_ = acquire("k").Release(context.Background())
	if awaits != before {
		t.Errorf("%d awaits for a key let go of longer than RetryDelay ago", awaits-before)
	}
}

// TestBatchLeaseYieldsAfterRelease: a key a batch lease let go of is, like
// one a lone lease let go of, awaited before the next local Acquire's first
// attempt; a key the batch found held elsewhere, which this Loop never
// held, is attempted at once.
func TestBatchLeaseYieldsAfterRelease(t *testing.T) {
	lp := newLoop(t)
	lp.RetryDelay = time.Hour // "lately" covers the whole test
	awaits := 0
	lp.Await = func(context.Context, string, time.Duration) error { awaits++; return nil }
	grab := func(_ context.Context, keys []string, _ lock.Options, turns []func()) ([]*lock.Lease, error) {
		leases := make([]*lock.Lease, len(keys))
		for i, k := range keys {
			if k != "held" {
				leases[i], _ = lock.NewLease(lock.LeaseParams{Key: k, Handle: releaser(turns[i])})
			}
		}
		return leases, nil
	}
	b, err := lp.AcquireBatch(context.Background(), []string{"k", "held"}, nil, grab)
	if err != nil || len(b.Leases) != 1 || len(b.Held) != 1 {
		t.Fatalf("batch = %v, %v", b, err)
	}
	if err := b.Leases.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key   string
		waits int
	}{{"k", 1}, {"held", 0}} {
		before := awaits
		try, _ := attempts()
		lease, err := lp.Acquire(context.Background(), c.key, nil, try)
		if err != nil {
			t.Fatal(err)
		}
		if got := awaits - before; got != c.waits {
			t.Errorf("%s: %d awaits before the attempt, want %d", c.key, got, c.waits)
		}
		_ = lease.Release(context.Background())
	}
}

// TestNoYieldAfterAnUnheededRelease: a release that woke nobody (Unheeded
// before its turn) is not noted, so the next local Acquire attempts at
// once; the mark is spent by that turn and the release after it is noted
// again.
func TestNoYieldAfterAnUnheededRelease(t *testing.T) {
	lp := newLoop(t)
	lp.RetryDelay = time.Hour // "lately" covers the whole test
	awaits := 0
	lp.Await = func(context.Context, string, time.Duration) error { awaits++; return nil }
	cycle := func(unheeded bool) int {
		t.Helper()
		before := awaits
		var turn func()
		try := func(_ context.Context, key string, _ lock.Options, tn func()) (*lock.Lease, error) {
			turn = tn
			l, _ := lock.NewLease(lock.LeaseParams{Key: key, Handle: releaser(func() {
				if unheeded {
					lp.Unheeded(key)
				}
				turn()
			})})
			return l, nil
		}
		lease, err := lp.Acquire(context.Background(), "k", nil, try)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		return awaits - before
	}
	cycle(true)
	if got := cycle(false); got != 0 {
		t.Errorf("after a release that woke nobody: %d awaits before the attempt, want 0", got)
	}
	if got := cycle(false); got != 1 {
		t.Errorf("after a release that woke a waiter: %d awaits before the attempt, want 1", got)
	}
	if len(lp.unheeded) != 0 {
		t.Errorf("%d unheeded marks left after their turns", len(lp.unheeded))
	}
}

// TestLostLeaseTurnNotedOnce: a lost lease hands its turn on from OnLost
// and again from its Release; only the first is noted, so a local Acquire
// after that Release, later than RetryDelay after the loss, attempts at
// once instead of awaiting a wake-up no release of this Loop sent.
func TestLostLeaseTurnNotedOnce(t *testing.T) {
	lp := newLoop(t)
	lp.RetryDelay = 20 * time.Millisecond
	awaits := 0
	lp.Await = func(context.Context, string, time.Duration) error { awaits++; return nil }
	var turn func()
	try := func(_ context.Context, key string, _ lock.Options, tn func()) (*lock.Lease, error) {
		turn = tn
		l, _ := lock.NewLease(lock.LeaseParams{Key: key, Handle: releaser(tn)})
		return l, nil
	}
	lease, err := lp.Acquire(context.Background(), "k", nil, try)
	if err != nil {
		t.Fatal(err)
	}
	turn() // OnLost
	time.Sleep(2 * lp.RetryDelay)
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	next, err := lp.Acquire(context.Background(), "k", nil, try)
	if err != nil {
		t.Fatal(err)
	}
	if awaits != 0 {
		t.Errorf("%d awaits before the first attempt after a lost lease's Release, want 0", awaits)
	}
	_ = next.Release(context.Background())
}

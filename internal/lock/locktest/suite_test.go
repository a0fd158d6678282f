package locktest_test

// A test of the suite itself: fake backends built on memlock, every Locker
// of one fake sharing one memlock as instances share a lock server. The
// sound fake passes the suite; each flawed one breaks one rule of the lock
// contract, and the cases named for it must fail it. The suite runs in a
// child process (a failing case would fail this test), only the cases that
// matter, so the whole takes seconds.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/memlock"
)

// flaw is the rule a fake backend breaks; sound breaks none.
type flaw string

const (
	sound flaw = "sound"
	// reentrantBatch: AcquireBatch obtains a key its own Locker (another
	// request of the same instance) holds.
	reentrantBatch flaw = "reentrant-batch"
	// batchSurvivesClose: Close, or a session loss, frees the keys of batch
	// leases on the server but never closes those leases' Done.
	batchSurvivesClose flaw = "batch-survives-close"
	// staleBatchRelease: releasing a batch lease already lost deletes its
	// key whoever holds it now (no compare-and-delete).
	staleBatchRelease flaw = "stale-batch-release"
	// releaseOneFreesBatch: releasing one lease of a batch frees every key
	// of the batch on the server (one server-side handle for all).
	releaseOneFreesBatch flaw = "release-one-frees-batch"
	// lateWake: a waiter is woken by a release only in its first 500 ms of
	// waiting; after that it finds the key free by a poll every 900 ms.
	lateWake flaw = "late-wake"
	// lateReturn: an Acquire whose context ends returns 450 ms after it.
	lateReturn flaw = "late-return"
)

// catchers is, for each flaw, the cases of the suite that must fail it.
var catchers = map[flaw][]string{
	reentrantBatch:       {"BatchReportsHeldBySameLocker"},
	batchSurvivesClose:   {"CloseLosesLeases"},
	staleBatchRelease:    {"BatchReleaseAfterLossHarmless"},
	releaseOneFreesBatch: {"Batch"},
	lateWake:             {"WakeOnRelease"},
	lateReturn:           {"CancelledAcquireLeavesNoWaiter", "WaitDeadlineHonoured", "CancelledWaiterThirdLocker"},
}

// TestSuiteCatchesFlawedBackends runs the cases of catchers on the sound
// fake, which must pass them, and each flaw's on its fake, which must fail
// every one of them.
func TestSuiteCatchesFlawedBackends(t *testing.T) {
	var all []string
	for _, cases := range catchers {
		all = append(all, cases...)
	}
	t.Run(string(sound), func(t *testing.T) {
		t.Parallel()
		if out, err := runSuite(t, sound, all); err != nil {
			t.Fatalf("the sound fake fails the suite (%v): the fake is wrong, not the suite\n%s", err, out)
		}
	})
	for f, cases := range catchers {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			out, err := runSuite(t, f, cases)
			if err == nil {
				t.Fatalf("the suite passes a backend with the flaw %q\n%s", f, out)
			}
			for _, name := range cases {
				if !strings.Contains(out, "--- FAIL: TestFakeBackend/"+name+" ") {
					t.Errorf("case %s passes a backend with the flaw %q\n%s", name, f, out)
				}
			}
		})
	}
}

// flawEnv names the flaw of the fake TestFakeBackend runs the suite on, in
// the child process runSuite starts.
const flawEnv = "LOCKTEST_FAKE_FLAW"

// TestFakeBackend runs the suite on a fake (in runSuite's child only).
func TestFakeBackend(t *testing.T) {
	f := flaw(os.Getenv(flawEnv))
	if f == "" {
		t.Skip("run by TestSuiteCatchesFlawedBackends in a child process")
	}
	locktest.Run(t, fakeConfig(f))
}

// runSuite runs the suite's cases on the fake with flaw f in a child
// process and returns its output, and its error when the suite failed.
func runSuite(t *testing.T, f flaw, cases []string) (string, error) {
	quoted := make([]string, len(cases))
	for i, c := range cases {
		quoted[i] = regexp.QuoteMeta(c)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFakeBackend$/^("+strings.Join(quoted, "|")+")$",
		"-test.count=1", "-test.v", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), flawEnv+"="+string(f))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func fakeConfig(f flaw) locktest.Config {
	srv := &fakeServer{mem: memlock.New(), owners: map[string]*lock.Lease{}}
	return locktest.Config{
		New: func(tb testing.TB) lock.Locker {
			return &fakeLocker{srv: srv, flaw: f, held: map[string]int{}, live: map[*fakeHandle]func(error){}}
		},
		Exclusive:   true,
		Distributed: true,
		FIFO:        f != lateWake, // a lost wake-up breaks the line: declared, as redis does
		Lose: func(t *testing.T, l lock.Locker, _ *lock.Lease) {
			l.(*fakeLocker).expire(fmt.Errorf("fake: session expired: %w", lock.ErrLeaseLost))
		},
	}
}

// fakeServer is a fake's lock server: a memlock, and which of its leases
// holds each key, so that a release can compare-and-delete or, flawed, not.
type fakeServer struct {
	mem    *memlock.Locker
	mu     sync.Mutex
	owners map[string]*lock.Lease
}

func (s *fakeServer) grant(inner *lock.Lease) {
	s.mu.Lock()
	s.owners[inner.Key()] = inner
	s.mu.Unlock()
}

// release frees inner's key if inner still holds it.
func (s *fakeServer) release(inner *lock.Lease) {
	s.mu.Lock()
	if s.owners[inner.Key()] == inner {
		delete(s.owners, inner.Key())
	}
	s.mu.Unlock()
	_ = inner.Release(context.Background())
}

// releaseKey frees key whoever holds it.
func (s *fakeServer) releaseKey(key string) {
	s.mu.Lock()
	cur := s.owners[key]
	s.mu.Unlock()
	if cur != nil {
		s.release(cur)
	}
}

// fakeLocker is one instance's Locker of a fake.
type fakeLocker struct {
	srv  *fakeServer
	flaw flaw

	mu     sync.Mutex
	held   map[string]int              // keys this Locker holds
	live   map[*fakeHandle]func(error) // leases a session loss ends
	forgot []*fakeHandle               // batch leases batchSurvivesClose never ends
	closed bool
}

type fakeHandle struct {
	l     *fakeLocker
	inner *lock.Lease
	batch bool
	group *[]*lock.Lease // the whole batch's inner leases (releaseOneFreesBatch)
}

func (h *fakeHandle) Release(context.Context) error {
	l, key := h.l, h.inner.Key()
	l.mu.Lock()
	delete(l.live, h)
	if l.held[key]--; l.held[key] <= 0 {
		delete(l.held, key)
	}
	l.mu.Unlock()
	switch {
	case h.batch && l.flaw == staleBatchRelease && h.inner.Err() != nil:
		l.srv.releaseKey(key)
	case h.group != nil:
		for _, inner := range *h.group {
			l.srv.release(inner)
		}
	default:
		l.srv.release(h.inner)
	}
	return nil
}

func (l *fakeLocker) Name() string               { return "fake-" + string(l.flaw) }
func (l *fakeLocker) Fenced() bool               { return false }
func (l *fakeLocker) Ping(context.Context) error { return nil }

// wrap hands out inner, which the server has just granted, as this
// Locker's lease.
func (l *fakeLocker) wrap(inner *lock.Lease, batch bool, group *[]*lock.Lease) *lock.Lease {
	h := &fakeHandle{l: l, inner: inner, batch: batch, group: group}
	l.srv.grant(inner)
	lease, lose := lock.NewLease(lock.LeaseParams{Key: inner.Key(), Handle: h})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[inner.Key()]++
	if batch && l.flaw == batchSurvivesClose {
		l.forgot = append(l.forgot, h)
	} else {
		l.live[h] = lose
	}
	return lease
}

func (l *fakeLocker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("fake: %w", lock.ErrUnavailable)
	}
	if l.flaw == lateWake && !lock.Apply(0, opts).TryOnce {
		return l.acquireLateWake(ctx, key, opts)
	}
	inner, err := l.srv.mem.Acquire(ctx, key, opts...)
	if err != nil {
		if l.flaw == lateReturn && ctx.Err() != nil {
			time.Sleep(450 * time.Millisecond)
		}
		return nil, err
	}
	return l.wrap(inner, false, nil), nil
}

// acquireLateWake waits for a wake-up 500 ms at a time, then polls: the
// lateWake flaw.
func (l *fakeLocker) acquireLateWake(ctx context.Context, key string, opts []lock.Option) (*lock.Lease, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		inner, err := l.srv.mem.Acquire(wctx, key, opts...)
		cancel()
		switch {
		case err == nil:
			return l.wrap(inner, false, nil), nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("fake: %w", ctx.Err())
		case !errors.Is(err, context.DeadlineExceeded):
			return nil, err
		}
		select {
		case <-time.After(900 * time.Millisecond):
		case <-ctx.Done():
			return nil, fmt.Errorf("fake: %w", ctx.Err())
		}
	}
}

func (l *fakeLocker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	sorted, err := lock.BatchKeys(keys)
	if err != nil {
		return lock.Batch{}, err
	}
	if err := ctx.Err(); err != nil {
		return lock.Batch{}, err
	}
	var b lock.Batch
	var group *[]*lock.Lease
	if l.flaw == releaseOneFreesBatch {
		group = new([]*lock.Lease)
	}
	for _, k := range sorted {
		l.mu.Lock()
		mine := l.held[k] > 0
		l.mu.Unlock()
		if mine && l.flaw == reentrantBatch {
			lease, _ := lock.NewLease(lock.LeaseParams{Key: k, Handle: noRelease{}})
			b.Leases = append(b.Leases, lease)
			continue
		}
		inner, err := l.srv.mem.Acquire(ctx, k, append(opts, lock.TryOnce())...)
		switch {
		case err == nil:
			if group != nil {
				*group = append(*group, inner)
			}
			b.Leases = append(b.Leases, l.wrap(inner, true, group))
		case errors.Is(err, lock.ErrNotAcquired):
			b.Held = append(b.Held, k)
		default:
			return lock.Batch{}, errors.Join(err, b.Leases.Release(context.WithoutCancel(ctx)))
		}
	}
	return b, nil
}

type noRelease struct{}

func (noRelease) Release(context.Context) error { return nil }

// expire is a session loss: the server frees every key of this Locker and
// its leases are lost (batchSurvivesClose forgets its batch leases).
func (l *fakeLocker) expire(cause error) {
	l.mu.Lock()
	live, forgot := l.live, l.forgot
	l.live, l.forgot = map[*fakeHandle]func(error){}, nil
	l.mu.Unlock()
	for h, lose := range live {
		lose(cause)
		l.srv.release(h.inner)
	}
	for _, h := range forgot {
		l.srv.release(h.inner)
	}
}

func (l *fakeLocker) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.expire(fmt.Errorf("fake: closed: %w", lock.ErrLeaseLost))
	return nil
}

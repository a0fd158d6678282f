package locktest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// MustBatch runs AcquireBatch within 10 s or fails the test.
func MustBatch(tb testing.TB, l lock.Locker, keys []string, opts ...lock.Option) lock.Batch {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := l.AcquireBatch(ctx, keys, opts...)
	if err != nil {
		tb.Fatalf("%s: batch %q: %v", l.Name(), keys, err)
	}
	return b
}

func mustReleaseSet(tb testing.TB, s lock.Set) {
	tb.Helper()
	for _, l := range s {
		MustRelease(tb, l)
	}
}

func keysOf(s lock.Set) []string {
	out := make([]string, len(s))
	for i, l := range s {
		out[i] = l.Key()
	}
	return out
}

// testBatch: every free key is obtained once, in key order, each lease as if
// acquired alone: released one at a time, each frees its own key only (the
// others stay held, as another Locker sees); released, each key is free
// again.
func testBatch(t *testing.T, c Config) {
	l := newLocker(t, c)
	other := another(t, c, l)
	base := Key(t)
	b := MustBatch(t, l, []string{base + "-c", base + "-a", base + "-b", base + "-a"})
	if want := []string{base + "-a", base + "-b", base + "-c"}; !slices.Equal(keysOf(b.Leases), want) || len(b.Held) != 0 {
		t.Fatalf("batch got %q, held %q; want %q and nothing held", keysOf(b.Leases), b.Held, want)
	}
	ids := map[string]bool{}
	for _, lease := range b.Leases {
		if lease.Err() != nil || closed(lease.Done()) {
			t.Errorf("%s: fresh lease already ended: %v", lease.Key(), lease.Err())
		}
		if c.Exclusive && l.Fenced() && lease.Token() == 0 {
			t.Errorf("%s: fenced backend returned token 0", lease.Key())
		}
		if ids[lease.ID().String()] {
			t.Errorf("%s: lease id %s shared with another key", lease.Key(), lease.ID())
		}
		ids[lease.ID().String()] = true
	}
	// The middle one first: a release may not free a key before or after
	// its own.
	for i, n := range []int{1, 2, 0} {
		MustRelease(t, b.Leases[n])
		for _, rest := range []int{1, 2, 0}[i+1:] {
			lease := b.Leases[rest]
			if c.Exclusive && !isHeld(t, other, lease.Key()) {
				t.Errorf("%s free once the batch's lease on %s was released, while its own lease says held (Err %v)",
					lease.Key(), b.Leases[n].Key(), lease.Err())
			}
		}
	}
	for _, k := range keysOf(b.Leases) {
		MustRelease(t, MustAcquire(t, l, k, lock.TryOnce()))
	}
	if _, err := l.AcquireBatch(context.Background(), []string{base, ""}); !errors.Is(err, lock.ErrInvalidKey) {
		t.Errorf("batch with an empty key = %v, want ErrInvalidKey", err)
	}
	empty := MustBatch(t, l, nil)
	if len(empty.Leases)+len(empty.Held) != 0 {
		t.Errorf("empty batch returned %v", empty)
	}
}

// testBatchHeld: a key someone else holds is reported, never obtained; the
// batch does not wait for it, and the rest are obtained. With same, the
// holder is the batch's own Locker (another request of one instance), and
// the other way round a key the batch holds is held for that Locker's
// Acquire too.
func testBatchHeld(t *testing.T, c Config, same bool) {
	holder := newLocker(t, c)
	l := holder // local excludes only within one Locker
	if c.Distributed && !same {
		l = newLocker(t, c)
	}
	base := Key(t)
	held := MustAcquire(t, holder, base+"-b")
	start := time.Now()
	b := MustBatch(t, l, []string{base + "-a", base + "-b", base + "-c"})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("batch took %v: it waited for the held key", d)
	}
	if !slices.Equal(b.Held, []string{base + "-b"}) || !slices.Equal(keysOf(b.Leases), []string{base + "-a", base + "-c"}) {
		t.Fatalf("batch got %q, held %q; want a and c, b held", keysOf(b.Leases), b.Held)
	}
	mustReleaseSet(t, b.Leases)
	MustRelease(t, held)
	again := MustBatch(t, l, []string{base + "-b"})
	if len(again.Leases) != 1 || len(again.Held) != 0 {
		t.Fatalf("after release: got %q, held %q", keysOf(again.Leases), again.Held)
	}
	if l.Fenced() && again.Leases[0].Token() <= held.Token() {
		t.Errorf("token %d after the holder's %d", again.Leases[0].Token(), held.Token())
	}
	if l == holder && !isHeld(t, l, base+"-b") {
		t.Errorf("%s-b: the Locker's own try got a key its batch holds", base)
	}
	mustReleaseSet(t, again.Leases)
}

// testBatchTokens: tokens of a key increase across single and batch
// acquisitions, whichever form took it last.
func testBatchTokens(t *testing.T, c Config) {
	l := newLocker(t, c)
	key := Key(t)
	var last lock.Token
	for i := range 12 {
		var lease *lock.Lease
		if i%2 == 0 {
			b := MustBatch(t, l, []string{key, key + "-other"})
			if len(b.Leases) != 2 {
				t.Fatalf("round %d: batch got %q, held %q", i, keysOf(b.Leases), b.Held)
			}
			lease = b.Leases[0]
			MustRelease(t, b.Leases[1])
		} else {
			lease = MustAcquire(t, l, key)
		}
		if lease.Token() <= last {
			t.Fatalf("round %d: token %d after %d", i, lease.Token(), last)
		}
		last = lease.Token()
		MustRelease(t, lease)
	}
}

// testBatchCancelled: a batch on a done context fails with its error and
// leaves every key free for another Locker at once; so does one whose
// context ends while its requests are in flight, at any point of them.
func testBatchCancelled(t *testing.T, c Config) {
	l, other := newLocker(t, c), newLocker(t, c)
	if !c.Distributed {
		other = l
	}
	base := Key(t)
	keys := []string{base + "-a", base + "-b", base + "-c"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b, err := l.AcquireBatch(ctx, keys); !errors.Is(err, context.Canceled) || len(b.Leases) != 0 {
		t.Fatalf("batch on a cancelled context = %v, %d leases; want context.Canceled and none", err, len(b.Leases))
	}
	for _, k := range keys {
		MustRelease(t, MustAcquire(t, other, k, lock.TryOnce()))
	}
	short := 0
	for i, d := range inFlight() {
		keys := manyKeys(fmt.Sprintf("%s-%d", base, i))
		ctx, cancel := context.WithTimeout(context.Background(), d)
		b, err := l.AcquireBatch(ctx, keys)
		cancel()
		if cutShort(t, other, "batch", d, b, err, keys) {
			short++
		}
	}
	t.Logf("%d of %d batches cut short", short, len(inFlight()))
}

// cutShort checks what an acquisition (what) under a deadline d left: cut
// short (err, the result), no lease and every key free for other; else
// every key covered, then released.
func cutShort(t *testing.T, other lock.Locker, what string, d time.Duration, b lock.Batch, err error, keys []string) bool {
	t.Helper()
	if err == nil {
		mustCover(t, b, keys)
		mustReleaseSet(t, b.Leases)
		return false
	}
	if len(b.Leases) != 0 {
		t.Errorf("%s cut short after %v: %v, yet %d leases", what, d, err, len(b.Leases))
	}
	when := fmt.Sprintf("after a %s cut short after %v (%v)", what, d, err)
	if errors.Is(err, lock.ErrCleanupPending) {
		// Said so: a server slow to answer the delete (a loaded machine).
		eventuallyFree(t, other, when, keys)
	} else {
		mustBeFree(t, other, when, keys)
	}
	return true
}

// eventuallyFree is mustBeFree for keys whose clean-up the backend said
// goes on in the background: free within cleanupGrace.
func eventuallyFree(tb testing.TB, l lock.Locker, when string, keys []string) {
	tb.Helper()
	deadline := time.Now().Add(cleanupGrace)
	for _, k := range keys {
		for {
			lease, err := l.Acquire(context.Background(), k, lock.TryOnce())
			if err == nil {
				MustRelease(tb, lease)
				break
			}
			if time.Now().After(deadline) {
				tb.Errorf("%s: %q still not free %v later: %v", when, k, cleanupGrace, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// cleanupGrace bounds a clean-up a backend declared pending.
const cleanupGrace = 10 * time.Second

// inFlight is the deadlines at which the cancellation tests cut a batch
// short: from before its first request is sent to after a round or two,
// 0 to 5 ms, denser towards 0 where a local Redis answers.
func inFlight() []time.Duration {
	const n, most = 20, 5 * time.Millisecond
	ds := make([]time.Duration, 0, n+1)
	for i := range n + 1 {
		ds = append(ds, most*time.Duration(i*i)/(n*n))
	}
	return ds
}

// manyKeys is the keys of one cancellation round: enough that a backend's
// round for them takes a while.
func manyKeys(base string) []string {
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%02d", base, i)
	}
	return keys
}

// mustBeFree fails unless l can take every key at once.
func mustBeFree(tb testing.TB, l lock.Locker, when string, keys []string) {
	tb.Helper()
	var taken []string
	var first error
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		lease, err := l.Acquire(ctx, k, lock.TryOnce())
		cancel()
		if err != nil {
			taken, first = append(taken, k), cmp.Or(first, err)
			continue
		}
		MustRelease(tb, lease)
	}
	if len(taken) > 0 {
		tb.Errorf("%s: %d of %d keys not free (%q): %v", when, len(taken), len(keys), taken, first)
	}
}

// mustCover fails unless b accounts for each of keys exactly once: obtained
// or held, each part in key order.
func mustCover(tb testing.TB, b lock.Batch, keys []string) {
	tb.Helper()
	want, err := lock.BatchKeys(keys)
	if err != nil {
		tb.Fatal(err)
	}
	got := keysOf(b.Leases)
	if !slices.IsSorted(got) || !slices.IsSorted(b.Held) {
		tb.Errorf("batch of %q: got %q, held %q: not in key order", want, got, b.Held)
	}
	all := slices.Sorted(slices.Values(append(got, b.Held...)))
	if !slices.Equal(all, want) {
		tb.Errorf("batch of %q: got %q, held %q: want every key once, obtained or held", want, got, b.Held)
	}
}

// testBatchExclusion: Lockers (as separate instances) take overlapping
// batches at random, letting each batch go with a release or with the next
// batch's try (lock.HandoverBatch); no key is ever held twice at once, and
// on fenced backends every key's tokens increase in the order it was held.
func testBatchExclusion(t *testing.T, c Config) {
	const workers, rounds = 6, 12
	base := Key(t)
	keys := []string{base + "-0", base + "-1", base + "-2", base + "-3"}
	var mu sync.Mutex
	inUse := map[string]bool{}
	lastTok := map[string]lock.Token{}
	shared := newLocker(t, c)
	var wg sync.WaitGroup
	for w := range workers {
		l := shared
		if c.Distributed {
			l = newLocker(t, c)
		}
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			var prev lock.Set
			done := func() { // prev is no longer used: about to go
				mu.Lock()
				for _, lease := range prev {
					inUse[lease.Key()] = false
				}
				mu.Unlock()
			}
			for range rounds {
				pick := slices.DeleteFunc(slices.Clone(keys), func(string) bool { return r.IntN(2) == 0 })
				done()
				var b lock.Batch
				if r.IntN(2) == 0 {
					mustReleaseSet(t, prev)
					b = MustBatch(t, l, pick)
				} else {
					b = mustHandover(t, l, prev, pick)
				}
				mustCover(t, b, pick)
				mu.Lock()
				for _, lease := range b.Leases {
					if inUse[lease.Key()] {
						t.Errorf("%s held twice at once", lease.Key())
					}
					inUse[lease.Key()] = true
					if l.Fenced() && lease.Token() <= lastTok[lease.Key()] {
						t.Errorf("%s: token %d after %d", lease.Key(), lease.Token(), lastTok[lease.Key()])
					}
					lastTok[lease.Key()] = lease.Token()
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				prev = b.Leases
			}
			done()
			mustReleaseSet(t, prev)
		})
	}
	wg.Wait()
}

// mustHandover runs lock.HandoverBatch within 10 s or fails the test.
func mustHandover(tb testing.TB, l lock.Locker, prev lock.Set, keys []string) lock.Batch {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, released, err := lock.HandoverBatch(ctx, l, prev, keys)
	if err != nil || released != nil {
		tb.Fatalf("%s: handover of %q to %q: %v, released: %v", l.Name(), keysOf(prev), keys, err, released)
	}
	return b
}

// handoverFrom returns a Locker holding the batch of base-a and base-b,
// and another Locker (the same one where Lockers do not exclude each other).
func handoverFrom(t *testing.T, c Config) (l, other lock.Locker, base string, first lock.Batch) {
	l, other = newLocker(t, c), newLocker(t, c)
	if !c.Distributed {
		other = l
	}
	base = Key(t)
	return l, other, base, MustBatch(t, l, []string{base + "-a", base + "-b"})
}

// testHandover: HandoverBatch lets the earlier batch go — its leases end,
// its keys are free for another Locker — and tries the new keys as
// AcquireBatch would; a key of both is reported held, and taken again it
// has a larger token.
func testHandover(t *testing.T, c Config) {
	l, other, base, first := handoverFrom(t, c)
	next := mustHandover(t, l, first.Leases, []string{base + "-d", base + "-b", base + "-c"})
	if want := []string{base + "-c", base + "-d"}; !slices.Equal(keysOf(next.Leases), want) || !slices.Equal(next.Held, []string{base + "-b"}) {
		t.Fatalf("handover got %q, held %q; want %q, and the key let go held", keysOf(next.Leases), next.Held, want)
	}
	for _, lease := range first.Leases {
		if !errors.Is(lease.Err(), lock.ErrReleased) || !closed(lease.Done()) {
			t.Errorf("%s: lease handed over still open: %v", lease.Key(), lease.Err())
		}
	}
	for _, lease := range first.Leases {
		again := MustAcquire(t, other, lease.Key(), lock.TryOnce())
		if l.Fenced() && again.Token() <= lease.Token() {
			t.Errorf("%s: token %d after the handed-over lease's %d", lease.Key(), again.Token(), lease.Token())
		}
		MustRelease(t, again)
	}
	if c.Exclusive && c.Distributed {
		if _, err := other.Acquire(context.Background(), base+"-c", lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("a key the handover took: another Locker's try = %v, want ErrNotAcquired", err)
		}
	}
	mustReleaseSet(t, next.Leases)
}

// testHandoverCancelled: on a done context, or with an invalid key, the try
// fails with its error, yet the earlier batch is let go: every key is free
// for another Locker.
func testHandoverCancelled(t *testing.T, c Config) {
	l, other, base, first := handoverFrom(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b, released, err := lock.HandoverBatch(ctx, l, first.Leases, []string{base + "-c"})
	if !errors.Is(err, context.Canceled) || len(b.Leases) != 0 || released != nil {
		t.Fatalf("handover on a cancelled context = %v, %d leases, released: %v; want context.Canceled, none, and the release done", err, len(b.Leases), released)
	}
	for _, k := range []string{base + "-a", base + "-b", base + "-c"} {
		MustRelease(t, MustAcquire(t, other, k, lock.TryOnce()))
	}
	// An invalid key fails the try, and still the earlier batch goes.
	again := MustBatch(t, l, []string{base + "-a"})
	if _, released, err := lock.HandoverBatch(context.Background(), l, again.Leases, []string{base + "-c", ""}); !errors.Is(err, lock.ErrInvalidKey) || released != nil {
		t.Fatalf("handover to an empty key = %v, released: %v; want ErrInvalidKey and the release done", err, released)
	}
	MustRelease(t, MustAcquire(t, other, base+"-a", lock.TryOnce()))
	// A try whose context ends in flight: the earlier batch is let go all
	// the same, and the try leaves nothing behind or returns what it got.
	short := 0
	for i, d := range inFlight() {
		base := fmt.Sprintf("%s-%d", base, i)
		prevKeys, keys := manyKeys(base+"-prev"), manyKeys(base+"-next")
		prev := MustBatch(t, l, prevKeys)
		mustCover(t, prev, prevKeys)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		b, released, err := lock.HandoverBatch(ctx, l, prev.Leases, keys)
		cancel()
		when := fmt.Sprintf("earlier batch of a handover cut short after %v (%v)", d, err)
		switch {
		case errors.Is(released, lock.ErrCleanupPending):
			eventuallyFree(t, other, when, prevKeys)
		case released != nil:
			t.Errorf("handover cut short after %v: release of the earlier batch: %v", d, released)
			fallthrough
		default:
			mustBeFree(t, other, when, prevKeys)
		}
		if cutShort(t, other, "handover", d, b, err, keys) {
			short++
		}
	}
	t.Logf("%d of %d handovers cut short", short, len(inFlight()))
}

package locktrace_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/locktrace"
	"github.com/stockguard/stockguard/internal/lock/memlock"
	"github.com/stockguard/stockguard/internal/lock/redislock"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/zklock"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

func newRecorder() (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	return rec, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
}

func TestConformanceAroundMemlock(t *testing.T) {
	_, tp := newRecorder()
	locktest.Run(t, locktest.Config{
		New:       func(testing.TB) lock.Locker { return locktrace.Wrap(memlock.New(), tp) },
		Exclusive: true,
		FIFO:      true,
	})
}

// TestConformanceAroundRedis runs the suite around a fenced, expiring
// backend whose leases release together (lock.BatchHandle) and can be lost.
func TestConformanceAroundRedis(t *testing.T) {
	addr := stacktest.RequireRedis(t)[0]
	raw := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = raw.Close() })
	_, tp := newRecorder()
	locktest.Run(t, locktest.Config{
		New: func(tb testing.TB) lock.Locker {
			l, err := redislock.New(addr, redislock.WithTTL(1500*time.Millisecond), redislock.WithNodeTimeout(time.Second))
			if err != nil {
				tb.Fatalf("redislock.New: %v", err)
			}
			return locktrace.Wrap(l, tp)
		},
		Exclusive:   true,
		Distributed: true,
		Expiring:    true,
		Lose: func(t *testing.T, _ lock.Locker, lease *lock.Lease) {
			if err := raw.Del(t.Context(), redisnode.LockKey(lease.Key())).Err(); err != nil {
				t.Fatalf("delete lock key: %v", err)
			}
		},
	})
}

// TestConformanceAroundZooKeeper runs the suite around a backend that is a
// lock.Handover, so its handover cases go through the wrapper's.
func TestConformanceAroundZooKeeper(t *testing.T) {
	servers := stacktest.RequireZK(t)
	_, tp := newRecorder()
	locktest.Run(t, locktest.Config{
		New: func(tb testing.TB) lock.Locker {
			l, err := zklock.New(servers, zklock.WithRoot("/stockguard-test/locktrace"))
			if err != nil {
				tb.Fatalf("zklock.New: %v", err)
			}
			tb.Cleanup(func() { _ = l.Close() })
			return locktrace.Wrap(l, tp)
		},
		Exclusive:   true,
		Distributed: true,
		FIFO:        true,
	})
}

// attrs is a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func byName(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func TestSpans(t *testing.T) {
	rec, tp := newRecorder()
	l := locktrace.Wrap(memlock.New(), tp)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")

	lease := locktest.MustAcquire(t, l, "sku-a")
	other := locktest.MustAcquire(t, l, "sku-held") // the batch finds it held
	b := locktest.MustBatch(t, l, []string{"sku-b", "sku-c", "sku-held"})
	if _, err := l.Acquire(ctx, "sku-held", lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryOnce on a held key = %v, want ErrNotAcquired", err)
	}
	locktest.MustRelease(t, lease)
	if err := b.Leases.Release(ctx); err != nil {
		t.Fatalf("release batch: %v", err)
	}
	locktest.MustRelease(t, other)
	parent.End()

	acq := byName(rec, locktrace.SpanAcquire)
	if len(acq) != 3 { // sku-a, sku-held (the holder), the refused TryOnce
		t.Fatalf("%d acquire spans, want 3", len(acq))
	}
	a := attrs(acq[0])
	if a[locktrace.AttrBackend].AsString() != "local" || a[locktrace.AttrKey].AsString() != "sku-a" ||
		a[locktrace.AttrObtained].AsInt64() != 1 || a[locktrace.AttrToken].AsInt64() != int64(lease.Token()) {
		t.Fatalf("acquire span attributes = %v", a)
	}
	refused := acq[2]
	if r := attrs(refused)[locktrace.AttrReason].AsString(); r != "not_acquired" {
		t.Fatalf("refused acquire reason = %q, want not_acquired", r)
	}
	if refused.Status().Code == codes.Error {
		t.Fatal("a key held elsewhere marked the span as failed")
	}
	if refused.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatal("acquire span is not the caller's span's child")
	}

	batch := byName(rec, locktrace.SpanAcquireBatch)
	if len(batch) != 1 {
		t.Fatalf("%d batch spans, want 1", len(batch))
	}
	ba := attrs(batch[0])
	if ba[locktrace.AttrKeys].AsInt64() != 3 || ba[locktrace.AttrObtained].AsInt64() != 2 || ba[locktrace.AttrHeld].AsInt64() != 1 ||
		len(ba[locktrace.AttrTokens].AsInt64Slice()) != 2 {
		t.Fatalf("batch span attributes = %v", ba)
	}

	rel := byName(rec, locktrace.SpanRelease)
	keys := make([]int64, 0, len(rel))
	for _, s := range rel {
		keys = append(keys, attrs(s)[locktrace.AttrKeys].AsInt64())
	}
	// One span per lone lease, and one for the batch's two leases released as a set.
	if !slices.Equal(keys, []int64{1, 2, 1}) {
		t.Fatalf("release spans cover %v keys, want [1 2 1]", keys)
	}
}

func TestFailedAcquireMarksSpan(t *testing.T) {
	rec, tp := newRecorder()
	l := locktrace.Wrap(memlock.New(), tp)
	held := locktest.MustAcquire(t, l, "k")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx, "k"); err == nil {
		t.Fatal("Acquire of a held key returned a lease")
	}
	locktest.MustRelease(t, held)
	acq := byName(rec, locktrace.SpanAcquire)
	last := acq[len(acq)-1]
	if last.Status().Code != codes.Error || len(last.Events()) == 0 {
		t.Fatalf("acquire cut by its deadline: status %v, %d events; want an error with the error recorded",
			last.Status(), len(last.Events()))
	}
}

// multi is a backend with a multi-key form of its own, as pglock has.
type multi struct {
	lock.Locker
	calls atomic.Int32
}

func (m *multi) AcquireAll(ctx context.Context, keys []string, opts ...lock.Option) (lock.Set, error) {
	m.calls.Add(1)
	return lock.AcquireAll(ctx, m.Locker, keys, opts...)
}

func TestOptionalInterfaces(t *testing.T) {
	rec, tp := newRecorder()
	if _, ok := locktrace.Wrap(memlock.New(), tp).(lock.MultiAcquirer); ok {
		t.Fatal("the wrapper of a backend without AcquireAll is a MultiAcquirer")
	}
	m := &multi{Locker: memlock.New()}
	l := locktrace.Wrap(m, tp)
	if _, ok := l.(lock.MultiAcquirer); !ok {
		t.Fatal("the wrapper of a MultiAcquirer is not one")
	}
	set, err := lock.AcquireAll(context.Background(), l, []string{"b", "a"})
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	if m.calls.Load() != 1 || len(set) != 2 || set[0].Key() != "a" {
		t.Fatalf("AcquireAll went through the backend's own %d times and got %d leases", m.calls.Load(), len(set))
	}
	if err := set.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	acq := byName(rec, locktrace.SpanAcquire)
	if len(acq) != 1 || attrs(acq[0])[locktrace.AttrKeys].AsInt64() != 2 {
		t.Fatalf("AcquireAll made %d acquire spans, want one for both keys", len(acq))
	}
}

// handing is a backend that is a lock.Handover, as zklock is; its
// handover is release-then-try, counted.
type handing struct {
	lock.Locker
	calls, prev atomic.Int32
}

func (h *handing) HandoverBatch(ctx context.Context, prev []lock.Handle, keys []string, opts ...lock.Option) (lock.Batch, error, error) {
	h.calls.Add(1)
	h.prev.Add(int32(len(prev)))
	released := lock.ReleaseHandles(ctx, prev)
	b, err := h.AcquireBatch(ctx, keys, opts...)
	return b, released, err
}

// TestHandoverThroughTheWrapper: the wrapper of a lock.Handover is one, its
// handover goes through the backend's own with the backend's leases, and
// one span tells what it let go of and what it got.
func TestHandoverThroughTheWrapper(t *testing.T) {
	rec, tp := newRecorder()
	if _, ok := locktrace.Wrap(memlock.New(), tp).(lock.Handover); ok {
		t.Fatal("the wrapper of a backend without a handover is a lock.Handover")
	}
	if _, ok := locktrace.Wrap(&multi{Locker: memlock.New()}, tp).(lock.Handover); ok {
		t.Fatal("the wrapper of a MultiAcquirer without a handover is a lock.Handover")
	}
	h := &handing{Locker: memlock.New()}
	l := locktrace.Wrap(h, tp)
	if _, ok := l.(lock.Handover); !ok {
		t.Fatal("the wrapper of a lock.Handover is not one")
	}
	ctx := context.Background()
	first, err := l.AcquireBatch(ctx, []string{"a", "b"})
	if err != nil || len(first.Leases) != 2 {
		t.Fatalf("AcquireBatch: %d leases, %v", len(first.Leases), err)
	}
	next, released, err := lock.HandoverBatch(ctx, l, first.Leases, []string{"b", "c"})
	if err != nil || released != nil {
		t.Fatalf("HandoverBatch: %v, released %v", err, released)
	}
	if h.calls.Load() != 1 || h.prev.Load() != 2 {
		t.Fatalf("the backend's handover ran %d times with %d leases, want once with both", h.calls.Load(), h.prev.Load())
	}
	if len(next.Leases) != 1 || next.Leases[0].Key() != "c" || !slices.Equal(next.Held, []string{"b"}) {
		t.Fatalf("handover got %d leases, held %v; want c, and b (let go of) reported held", len(next.Leases), next.Held)
	}
	for _, k := range []string{"a", "b"} {
		locktest.MustRelease(t, locktest.MustAcquire(t, l, k, lock.TryOnce()))
	}
	locktest.MustRelease(t, next.Leases[0])
	spans := byName(rec, locktrace.SpanAcquireBatch)
	// b went back to its line before the backend's round: the span counts
	// the round, in which c was tried and a and b let go of.
	last := attrs(spans[len(spans)-1])
	got := []int64{last[locktrace.AttrReleased].AsInt64(), last[locktrace.AttrKeys].AsInt64(),
		last[locktrace.AttrObtained].AsInt64(), last[locktrace.AttrHeld].AsInt64()}
	if !slices.Equal(got, []int64{2, 1, 1, 0}) {
		t.Fatalf("handover span: released, keys, obtained, held = %v; want [2 1 1 0]", got)
	}
}

// lossy is a backend whose leases the test can lose, as a backend's
// session watcher would.
type lossy struct {
	lock.Locker
	lose func(error)
}

func (l *lossy) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	lease, lose := lock.NewLease(lock.LeaseParams{Key: key, Token: 7, Handle: nopHandle{}})
	l.lose = lose
	return lease, nil
}

type nopHandle struct{}

func (nopHandle) Release(context.Context) error { return nil }

func TestLossReachesTheWrapper(t *testing.T) {
	_, tp := newRecorder()
	inner := &lossy{Locker: memlock.New()}
	l := locktrace.Wrap(inner, tp)
	lease := locktest.MustAcquire(t, l, "k")
	if lease.Token() != 7 {
		t.Fatalf("token %d, want the backend's 7", lease.Token())
	}
	inner.lose(lock.ErrLeaseLost)
	select {
	case <-lease.Done():
	case <-time.After(time.Second):
		t.Fatal("wrapper lease not done a second after the backend's was lost")
	}
	if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
		t.Fatalf("Err() = %v, want ErrLeaseLost", lease.Err())
	}
	locktest.MustRelease(t, lease)
}

// expiring is a backend whose leases expire and are extended by the
// watchdog, as redis' are.
type expiring struct {
	lock.Locker
	last *lock.Lease
}

type extendHandle struct{ ttl time.Duration }

func (extendHandle) Release(context.Context) error { return nil }

func (h extendHandle) Extend(context.Context) (time.Time, error) { return time.Now().Add(h.ttl), nil }

func (l *expiring) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	const ttl = 90 * time.Millisecond
	l.last, _ = lock.NewLease(lock.LeaseParams{Key: key, Deadline: time.Now().Add(ttl), TTL: ttl, Watchdog: true,
		Handle: extendHandle{ttl}})
	return l.last, nil
}

// TestDeadlineFollowsTheBackend: the wrapper's lease reports the backend
// lease's deadline, and the later one once the watchdog has extended it.
func TestDeadlineFollowsTheBackend(t *testing.T) {
	_, tp := newRecorder()
	inner := &expiring{Locker: memlock.New()}
	lease := locktest.MustAcquire(t, locktrace.Wrap(inner, tp), "k")
	first := lease.Deadline()
	if first.IsZero() || !first.Equal(inner.last.Deadline()) {
		t.Fatalf("wrapper Deadline %v, backend's %v", first, inner.last.Deadline())
	}
	time.Sleep(200 * time.Millisecond) // several extensions at TTL/3
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
	if d := lease.Deadline(); !d.After(first) {
		t.Fatalf("wrapper Deadline %v after extensions, first %v: not following the backend's", d, first)
	}
	locktest.MustRelease(t, lease)
}

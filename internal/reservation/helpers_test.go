package reservation_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/memlock"
	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/reservation"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// fencedLocker is the in-process lock with real fencing tokens, shared by
// every Service of a test as a distributed lock is by every instance. The
// test can lose any live lease on purpose, as a backend does when its TTL
// lapses or its session expires.
type fencedLocker struct {
	*memlock.Locker
	next atomic.Uint64
	// unwatched counts the leases taken without a watchdog.
	unwatched atomic.Int32

	mu   sync.Mutex
	lose map[string]func(error)
	// granted, when set, runs with each lease granted, once loseLease can
	// lose it: a test loses a lease before its holder has used it.
	granted func(*lock.Lease)
	// handedOver counts the leases let go of by HandoverBatch.
	handedOver atomic.Int32
	// waited counts the acquisitions that wait in a key's line (not
	// TryOnce): a queue leader's, or a test's own; tried the others, a
	// batch's tries of its keys one by one.
	waited, tried atomic.Int32
}

func newFencedLocker() *fencedLocker {
	return &fencedLocker{Locker: memlock.New(), lose: make(map[string]func(error))}
}

func (l *fencedLocker) Fenced() bool { return true }

func (l *fencedLocker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	o := lock.Apply(0, opts)
	if o.TryOnce {
		l.tried.Add(1)
	} else {
		l.waited.Add(1)
	}
	inner, err := l.Locker.Acquire(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	if o.NoWatchdog {
		l.unwatched.Add(1)
	}
	lease, lose := lock.NewLease(lock.LeaseParams{Key: key, Token: lock.Token(l.next.Add(1)), Handle: releaser{inner}})
	l.mu.Lock()
	l.lose[key] = lose
	granted := l.granted
	l.mu.Unlock()
	if granted != nil {
		granted(lease)
	}
	return lease, nil
}

// loseLease marks the live lease on key lost.
func (l *fencedLocker) loseLease(key string) {
	l.mu.Lock()
	lose := l.lose[key]
	l.mu.Unlock()
	lose(fmt.Errorf("test: %q: %w", key, lock.ErrLeaseLost))
}

type releaser struct{ l *lock.Lease }

func (r releaser) Release(ctx context.Context) error { return r.l.Release(ctx) }

// spyStore counts the store calls of the critical section and lets a test
// act right before or after a claim, between the claim and the write.
type spyStore struct {
	inventory.Store

	mu          sync.Mutex
	claims      int
	writes      []int // orders per write
	moves       []int // status changes per write that had any
	afterClaim  func(fences []inventory.Fence)
	beforeClaim func(fences []inventory.Fence)
	beforeWrite func()
	// refuse, when set, may refuse a write before it reaches the database,
	// as the database would; attempts counts the writes tried.
	refuse   func(w inventory.Write) error
	attempts int
	// beforeLookup, when set, runs before every KnownSKUs, with its context.
	beforeLookup func(ctx context.Context)
}

func (s *spyStore) KnownSKUs(ctx context.Context, names []string) (map[string]bool, error) {
	s.mu.Lock()
	hook := s.beforeLookup
	s.mu.Unlock()
	if hook != nil {
		hook(ctx)
	}
	return s.Store.KnownSKUs(ctx, names)
}

func (s *spyStore) Claim(ctx context.Context, fences []inventory.Fence, create bool) (map[string]inventory.SKU, error) {
	s.mu.Lock()
	before := s.beforeClaim
	s.mu.Unlock()
	if before != nil && !create {
		before(fences)
	}
	got, err := s.Store.Claim(ctx, fences, create)
	s.mu.Lock()
	s.claims++
	hook := s.afterClaim
	s.mu.Unlock()
	if hook != nil && !create {
		hook(fences)
	}
	return got, err
}

func (s *spyStore) Write(ctx context.Context, fences []inventory.Fence, w inventory.Write) error {
	s.mu.Lock()
	hook, refuse := s.beforeWrite, s.refuse
	s.attempts++
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	if refuse != nil {
		if err := refuse(w); err != nil {
			return err
		}
	}
	err := s.Store.Write(ctx, fences, w)
	if err == nil {
		s.mu.Lock()
		s.writes = append(s.writes, len(w.Orders))
		if len(w.Transitions) > 0 {
			s.moves = append(s.moves, len(w.Transitions))
		}
		s.mu.Unlock()
	}
	return err
}

// counts returns the claims and the successful writes since the last call.
func (s *spyStore) counts() (claims int, writes []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	claims, writes = s.claims, s.writes
	s.claims, s.writes, s.attempts = 0, nil, 0
	return claims, writes
}

// moved returns, for each successful write with status changes so far,
// how many it made.
func (s *spyStore) moved() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.moves)
}

// tried returns the writes attempted since the last counts.
func (s *spyStore) tried() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

func (s *spyStore) onClaim(f func(fences []inventory.Fence)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afterClaim = f
}

// onWrite runs f before every write, after the leases were last checked.
func (s *spyStore) onWrite(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeWrite = f
}

// lossCounter counts the leases a Service reports lost.
type lossCounter struct{ lost atomic.Int32 }

func (*lossCounter) LockWait(time.Duration) {}
func (*lossCounter) StaleFence()            {}
func (c *lossCounter) LeaseLost()           { c.lost.Add(1) }

// newPGStore opens the real store on a fresh, migrated database.
func newPGStore(t testing.TB) *postgres.Store {
	t.Helper()
	return newPGStoreAt(t, stacktest.NewDatabase(t, context.Background()))
}

// newPGStoreAt opens the real store on the database at url and migrates it.
func newPGStoreAt(t testing.TB, url string) *postgres.Store {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, url, postgres.WithMaxConns(16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := postgres.Migrate(ctx, st.DB()); err != nil {
		t.Fatal(err)
	}
	return st
}

type fixture struct {
	t      *testing.T
	store  *spyStore
	locker *fencedLocker
	svc    *reservation.Service
}

func newFixture(t *testing.T, c reservation.Coalescing) *fixture {
	t.Helper()
	f := &fixture{t: t, store: &spyStore{Store: newPGStore(t)}, locker: newFencedLocker()}
	f.svc = f.service(c)
	return f
}

// service is one more instance over the fixture's store and lock.
func (f *fixture) service(c reservation.Coalescing) *reservation.Service {
	return reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: 5 * time.Second, Coalescing: c})
}

func (f *fixture) stock(sku string, n int64) {
	f.t.Helper()
	if _, err := f.svc.SetStock(context.Background(), sku, n); err != nil {
		f.t.Fatalf("stock %s: %v", sku, err)
	}
	f.store.counts()
}

func (f *fixture) audit(sku string) inventory.Audit {
	f.t.Helper()
	a, err := f.svc.Audit(context.Background(), sku)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// hold takes the lease on sku as another instance would, so that orders
// queue behind it; the returned func lets it go.
func (f *fixture) hold(sku string) func() {
	f.t.Helper()
	l, err := f.locker.Acquire(context.Background(), sku)
	if err != nil {
		f.t.Fatal(err)
	}
	return func() { _ = l.Release(context.Background()) }
}

// lockRow holds sku's row in a session of the test's own, as a
// transaction stuck in the database does: a claim of it waits until the
// returned func lets it go (or the statement times out).
func (f *fixture) lockRow(sku string) func() {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.store.Store.(*postgres.Store).DB().BeginTx(ctx, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM skus WHERE sku = $1 FOR UPDATE`, sku); err != nil {
		f.t.Fatal(err)
	}
	return func() { _ = tx.Rollback() }
}

type result struct {
	o        *inventory.Order
	replayed bool
	err      error
}

// queue starts Place for each request, one after the other, waiting until
// each is queued behind a held lease, so that they arrive in this order; it
// returns their results, in the same order, once all have answered.
func (f *fixture) queue(svc *reservation.Service, key string, reqs ...inventory.PlaceRequest) func() []result {
	f.t.Helper()
	ctxs := make([]context.Context, len(reqs))
	for i := range ctxs {
		ctxs[i] = context.Background()
	}
	results := f.queueCtx(svc, key, ctxs, reqs)
	return func() []result {
		out, _ := results()
		return out
	}
}

// queueCtx is queue with a context for each request; it also returns when
// each was answered.
func (f *fixture) queueCtx(svc *reservation.Service, key string, ctxs []context.Context, reqs []inventory.PlaceRequest) func() ([]result, []time.Time) {
	f.t.Helper()
	out := make([]result, len(reqs))
	at := make([]time.Time, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		before := reservation.Queued(svc, key)
		wg.Go(func() {
			o, replayed, err := svc.Place(ctxs[i], r)
			out[i], at[i] = result{o, replayed, err}, time.Now()
		})
		waitFor(f.t, fmt.Sprintf("order %d queued", i), func() bool { return reservation.Queued(svc, key) == before+1 })
	}
	return func() ([]result, []time.Time) {
		wg.Wait()
		return out, at
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func req(key string, lines ...inventory.LineRequest) inventory.PlaceRequest {
	return inventory.PlaceRequest{Lines: lines, IdempotencyKey: key}
}

func line(sku string, q int64) inventory.LineRequest {
	return inventory.LineRequest{SKU: sku, Quantity: q}
}

// HandoverBatch implements lock.Handover as a backend without a cheaper
// form would: release, then try the keys not let go of.
func (l *fencedLocker) HandoverBatch(ctx context.Context, prev []lock.Handle, keys []string, opts ...lock.Option) (lock.Batch, error, error) {
	var errs []error
	gone := make(map[string]bool, len(prev))
	for _, h := range prev {
		gone[h.(releaser).l.Key()] = true
		errs = append(errs, h.Release(ctx))
	}
	l.handedOver.Add(int32(len(prev)))
	var back []string
	keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool {
		if gone[k] {
			back = append(back, k)
		}
		return gone[k]
	})
	b, err := l.AcquireBatch(ctx, keys, opts...)
	b.Held = slices.Sorted(slices.Values(append(b.Held, back...)))
	return b, errors.Join(errs...), err
}

// AcquireBatch takes each key through Acquire, so that a batch's leases get
// this locker's tokens too.
func (l *fencedLocker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	return lock.EachOnce(ctx, l, keys, opts...)
}

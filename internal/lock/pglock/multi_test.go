package pglock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// leaseSessions counts the sessions of this database that hold or wait for
// leases, and the advisory locks they hold.
func leaseSessions(tb testing.TB, c *pgx.Conn) (sessions, locks int) {
	tb.Helper()
	err := c.QueryRow(context.Background(), `SELECT count(DISTINCT a.pid), count(l.pid)
		FROM pg_stat_activity a LEFT JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' AND l.granted
		WHERE a.datname = current_database() AND a.application_name LIKE 'stockguard-lease:%'`).Scan(&sessions, &locks)
	if err != nil {
		tb.Fatalf("count lease sessions: %v", err)
	}
	return sessions, locks
}

func manyKeys(t *testing.T, n int) []string {
	base := locktest.Key(t)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%03d", base, i)
	}
	return keys
}

// TestManyKeysOneConnection holds 100 keys at once — a multi-key operation
// and a batch, each of 100 — with a pool of 4 connections, and checks that
// each takes one connection, that a one-key acquisition meanwhile is not
// starved, and that per-key releases free their keys one by one.
func TestManyKeysOneConnection(t *testing.T) {
	const pool, n = 4, 100
	url := stacktest.NewDatabase(t, t.Context())
	l := newLocker(t, url, WithMaxConns(pool))
	other := newLocker(t, url)
	probe := connect(t, url)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	orderKeys := manyKeys(t, n)
	order, err := lock.AcquireAll(ctx, l, orderKeys)
	if err != nil {
		t.Fatalf("AcquireAll of %d keys with a pool of %d: %v", n, pool, err)
	}
	batch := locktest.MustBatch(t, l, manyKeys(t, n))
	if len(batch.Leases) != n || len(batch.Held) != 0 {
		t.Fatalf("batch of %d: %d leases, %d held", n, len(batch.Leases), len(batch.Held))
	}
	if s, k := leaseSessions(t, probe); s != 2 || k != 2*n {
		t.Fatalf("%d sessions holding %d locks, want 2 holding %d", s, k, 2*n)
	}
	if got := l.pool.Stat().AcquiredConns(); got != 2 {
		t.Fatalf("%d pooled connections in use, want 2", got)
	}

	// Not starved: a one-key acquisition of another key answers at once.
	start := time.Now()
	lone := locktest.MustAcquire(t, l, locktest.Key(t))
	if d := time.Since(start); d > time.Second {
		t.Errorf("one-key acquisition beside 200 held keys took %v", d)
	}
	locktest.MustRelease(t, lone)

	// Every key is held, each with its own token; the order's keys are
	// locked for another instance, and free again one lease at a time.
	seen := map[lock.Token]bool{}
	for _, lease := range append(append(lock.Set{}, order...), batch.Leases...) {
		if lease.Token() == 0 || seen[lease.Token()] {
			t.Fatalf("%s: token %d zero or shared", lease.Key(), lease.Token())
		}
		seen[lease.Token()] = true
	}
	if _, err := other.Acquire(ctx, orderKeys[50], lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryOnce on a held key = %v", err)
	}
	locktest.MustRelease(t, order[50])
	taken := locktest.MustAcquire(t, other, orderKeys[50], lock.TryOnce())
	if taken.Token() <= order[50].Token() {
		t.Fatalf("token %d after %d", taken.Token(), order[50].Token())
	}
	locktest.MustRelease(t, taken)
	if err := order[51].Err(); err != nil {
		t.Fatalf("a neighbour's release ended another lease: %v", err)
	}
	if err := order.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := batch.Leases.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := l.pool.Stat().AcquiredConns(); got != 0 {
		t.Fatalf("%d pooled connections still in use after every release", got)
	}
	if s, _ := leaseSessions(t, probe); s != 0 {
		t.Fatalf("%d sessions still carry a lease's name", s)
	}
	// The connections went back clean: the keys are free, the pool works.
	set, err := lock.AcquireAll(ctx, other, orderKeys)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestHoldWaitBound: a multi-key acquisition that holds a key while it waits
// for another gives it up within the bound, so a waiter for that key is not
// kept out for the other holder's whole hold; it gets both keys once they
// are free.
func TestHoldWaitBound(t *testing.T) {
	const holdWait = 200 * time.Millisecond
	url := stacktest.NewDatabase(t, t.Context())
	a, b, c := newLocker(t, url), newLocker(t, url), newLocker(t, url)
	base := locktest.Key(t)
	first, second := base+"-1", base+"-2"
	held := locktest.MustAcquire(t, a, second)

	type result struct {
		set lock.Set
		err error
	}
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		set, err := lock.AcquireAll(ctx, b, []string{second, first}, lock.WithHoldWait(holdWait))
		res <- result{set, err}
	}()
	// b takes first at once and waits for second; c must get first within
	// the bound (plus a queueing margin), not when a lets go of second.
	ctx, cancel := context.WithTimeout(context.Background(), 5*holdWait)
	defer cancel()
	start := time.Now()
	lease, err := c.Acquire(ctx, first)
	if err != nil {
		t.Fatalf("waiter for a key held by a multi-key wait: %v after %v", err, time.Since(start))
	}
	t.Logf("first key passed on after %v", time.Since(start))
	locktest.MustRelease(t, lease)
	locktest.MustRelease(t, held)
	r := <-res
	if r.err != nil {
		t.Fatalf("AcquireAll once the keys are free: %v", r.err)
	}
	if len(r.set) != 2 || r.set[0].Key() != first || r.set[1].Key() != second {
		t.Fatalf("got %v", r.set)
	}
	if r.set.Lease(first).Token() <= lease.Token() || r.set.Lease(second).Token() <= held.Token() {
		t.Fatalf("tokens %d, %d after %d, %d", r.set[0].Token(), r.set[1].Token(), lease.Token(), held.Token())
	}
	if err := r.set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSessionLossLosesEveryLease ends the session a batch holds its keys
// on: every lease on it is lost at once, and every key is free.
func TestSessionLossLosesEveryLease(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	l, other := newLocker(t, url), newLocker(t, url)
	keys := manyKeys(t, 3)
	b := locktest.MustBatch(t, l, keys)
	if len(b.Leases) != len(keys) {
		t.Fatalf("batch got %d leases", len(b.Leases))
	}
	terminate(t, url, b.Leases[0]) // the session is named for its first lease
	for _, lease := range b.Leases {
		select {
		case <-lease.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not lost 5 s after its session ended", lease.Key())
		}
		if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
			t.Fatalf("%s: Err = %v, want ErrLeaseLost", lease.Key(), lease.Err())
		}
	}
	for _, k := range keys {
		locktest.MustRelease(t, locktest.MustAcquire(t, other, k, lock.TryOnce()))
	}
	if err := b.Leases.Release(context.Background()); err != nil {
		t.Fatalf("release of lost leases: %v", err)
	}
}

// TestLeaseOfASetLapsesAlone: leases taken together share a session, yet
// each has its own validity, as if acquired alone (DESIGN). Without the
// watchdog, the lease its holder extends outlives its TTL; the one left
// unextended lapses at its deadline and gives up its own key, and the
// session goes on holding the other's.
func TestLeaseOfASetLapsesAlone(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	l, other := newLocker(t, url), newLocker(t, url)
	probe := connect(t, url)
	const ttl = time.Second
	keys := manyKeys(t, 2)
	set, err := lock.AcquireAll(t.Context(), l, keys, lock.WithTTL(ttl), lock.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	kept, lapsed := set[0], set[1]
	for start := time.Now(); time.Since(start) < 2*ttl; time.Sleep(ttl / 4) {
		if _, err := kept.Extend(t.Context()); err != nil {
			t.Fatalf("Extend of the kept lease %v after acquiring: %v (the other: %v)", time.Since(start), err, lapsed.Err())
		}
	}
	if !errors.Is(lapsed.Err(), lock.ErrLeaseLost) || kept.Err() != nil {
		t.Fatalf("after 2 TTLs extending one lease: the unextended one's Err = %v, the extended one's = %v", lapsed.Err(), kept.Err())
	}
	waitFor(t, "the lapsed lease's key free", func() bool { return !heldElsewhere(t, other, keys[1]) })
	if !heldElsewhere(t, other, keys[0]) {
		t.Fatal("the extended lease's key is free")
	}
	if sessions, locks := leaseSessions(t, probe); sessions != 1 || locks != 1 {
		t.Fatalf("%d lease sessions holding %d locks, want the one session holding the extended lease's key", sessions, locks)
	}
	if err := set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "nothing held", func() bool { return heldAdvisory(t, probe) == 0 })
}

// TestMultiTryOnce: all or nothing, and nothing left held when not all.
func TestMultiTryOnce(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	l, other := newLocker(t, url), newLocker(t, url)
	keys := manyKeys(t, 3)
	held := locktest.MustAcquire(t, other, keys[2])
	if _, err := lock.AcquireAll(context.Background(), l, keys, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("AcquireAll TryOnce with a held key = %v", err)
	}
	for _, k := range keys[:2] {
		locktest.MustRelease(t, locktest.MustAcquire(t, other, k, lock.TryOnce()))
	}
	locktest.MustRelease(t, held)
	set, err := lock.AcquireAll(context.Background(), l, keys, lock.TryOnce())
	if err != nil || len(set) != len(keys) {
		t.Fatalf("AcquireAll TryOnce on free keys = %v, %v", set, err)
	}
	if err := set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestMultiKeyWaitKeepsItsPlace: a multi-key acquisition waiting for its
// first key holds nothing, so the hold-wait bound does not apply to it: it
// keeps its place in that key's line however long the wait, ahead of a
// waiter that queued after it, on its one connection.
func TestMultiKeyWaitKeepsItsPlace(t *testing.T) {
	const holdWait = 200 * time.Millisecond
	url := stacktest.NewDatabase(t, t.Context())
	x, m, y := newLocker(t, url), newLocker(t, url), newLocker(t, url)
	probe := connect(t, url)
	base := locktest.Key(t)
	a, b := base+"-a", base+"-b"
	held := locktest.MustAcquire(t, x, a)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan string, 2)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		set, err := lock.AcquireAll(ctx, m, []string{a, b}, lock.WithHoldWait(holdWait))
		if err != nil {
			t.Errorf("multi-key wait: %v", err)
			got <- "multi-key wait failed"
			return
		}
		got <- "multi-key"
		_ = set.Release(context.Background())
	})
	waitFor(t, "the multi-key wait to queue", func() bool { return lockWaiters(t, probe) == 1 })
	wg.Go(func() {
		lease, err := y.Acquire(ctx, a)
		if err != nil {
			t.Errorf("one-key wait: %v", err)
			got <- "one-key wait failed"
			return
		}
		got <- "one-key"
		_ = lease.Release(context.Background())
	})
	waitFor(t, "the one-key wait to queue", func() bool { return lockWaiters(t, probe) == 2 })
	time.Sleep(5 * holdWait) // each bound passed would have sent the multi-key wait to the back
	locktest.MustRelease(t, held)
	if first, second := <-got, <-got; first != "multi-key" {
		t.Fatalf("%s got %q first, then %s; the multi-key wait queued first", first, a, second)
	}
	if n := m.pool.Stat().NewConnsCount(); n != 1 {
		t.Errorf("the multi-key acquisition opened %d connections, want 1", n)
	}
}

// TestCloseDuringGrant: Close lands between a multi-key statement and the
// grant of its leases. The acquisition fails with ErrUnavailable, its
// connection is ended exactly once (Close waits for it), nothing panics.
func TestCloseDuringGrant(t *testing.T) {
	l := newLocker(t, stacktest.NewDatabase(t, t.Context()))
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v", r)
		}
	}()
	closed := make(chan error, 1)
	ctx := context.Background()
	err := l.withConn(ctx, ctx, func(c *pgxpool.Conn) error {
		go func() { closed <- l.Close() }()
		waitFor(t, "Close to begin", func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.closed
		})
		_, err := l.grant(c, []string{locktest.Key(t)}, newIDs(1), []int64{1}, time.Now(), lock.Apply(time.Second, nil))
		return err
	})
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("acquisition that met Close = %v, want ErrUnavailable", err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits for the acquisition's connection")
	}
}

// TestReleaseDuringKeepalive: a lease released while its keepalive's
// statement is in flight is released, not lost: pgx closes a connection
// whose statement is cancelled, which ends the session and frees every
// lock on it, a batch's other leases' too. The session's backend is paused
// (SIGSTOP, on a cluster of the test's own) so that the keepalive's
// statement is in flight for as long as the test needs; one lease, so that
// the statement in flight is that lease's.
func TestReleaseDuringKeepalive(t *testing.T) {
	ctx := t.Context()
	url := privateDatabase(t)
	l, other := newLocker(t, url), newLocker(t, url)
	key := manyKeys(t, 1)[0]
	lease := locktest.MustAcquire(t, l, key, lock.WithTTL(900*time.Millisecond))
	var pid int
	if err := connect(t, url).QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`,
		leaseAppName(lease.ID())).Scan(&pid); err != nil {
		t.Fatalf("the lease's backend: %v", err)
	}
	resume := pause(t, pid)
	var s *session
	l.mu.Lock()
	for ls := range l.live {
		s = ls
	}
	l.mu.Unlock()
	// The keepalive (at TTL/3) holds the session while its statement waits
	// on the paused backend.
	waitFor(t, "the keepalive's statement in flight", func() bool { return busy(s) })
	time.AfterFunc(200*time.Millisecond, resume)
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release during the keepalive: %v; want released", err)
	}
	locktest.MustRelease(t, locktest.MustAcquire(t, other, key, lock.TryOnce()))
}

// TestCancelUnansweredSaysWhatItLeft: a waiter whose server does not answer
// the cancel of its lock wait (its backend paused, as behind a partition)
// returns after cancelGrace and leaves the cancel to the background; its
// backend may stay queued, or be granted the key, until the cancel lands or
// the socket is closed, and the error must say so (lock.ErrCleanupPending),
// as the contract asks.
func TestCancelUnansweredSaysWhatItLeft(t *testing.T) {
	url := privateDatabase(t)
	a, b := newLocker(t, url), newLocker(t, url)
	probe := connect(t, url)
	key := manyKeys(t, 1)[0]
	held := locktest.MustAcquire(t, a, key)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, key)
		errc <- err
	}()
	waitFor(t, "the waiter queued on the server", func() bool { return lockWaiters(t, probe) == 1 })
	var pid int
	if err := probe.QueryRow(t.Context(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	resume := pause(t, pid)
	cancel()
	err := <-errc
	resume()
	if !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrCleanupPending) {
		t.Fatalf("cancelled Acquire whose cancel went unanswered = %v; want context.Canceled with lock.ErrCleanupPending", err)
	}
	// Resumed, the backend takes the cancel and leaves the queue.
	waitFor(t, "the waiter gone from the queue", func() bool { return lockWaiters(t, probe) == 0 })
	locktest.MustRelease(t, held)
}

// TestHoldWaitCancelUnansweredSaysWhatItLeft: an AcquireAll past its
// hold-wait bound cancels its wait for the busy key while holding the
// smaller one; its context alive, it waits for the answer as long as the
// cancel is tried (cancelGiveUp). When the server never answers, the
// socket is closed, and the session may hold the smaller key until the
// server notices. That is lock.ErrCleanupPending for the caller, not a
// dead pooled connection to retry on another: a retry would queue behind
// the key its own old session holds and hide why. Nor is it the caller's
// deadline: only the hold-wait bound passed.
func TestHoldWaitCancelUnansweredSaysWhatItLeft(t *testing.T) {
	url := privateDatabase(t)
	a, b := newLocker(t, url), newLocker(t, url)
	probe := connect(t, url)
	keys := manyKeys(t, 2)
	held := locktest.MustAcquire(t, a, keys[1])
	ctx, cancel := context.WithTimeout(t.Context(), cancelGiveUp+10*time.Second)
	defer cancel()
	const bound = 300 * time.Millisecond
	errc := make(chan error, 1)
	go func() {
		_, err := lock.AcquireAll(ctx, b, keys, lock.WithHoldWait(bound))
		errc <- err
	}()
	waitFor(t, "the waiter queued on the server", func() bool { return lockWaiters(t, probe) == 1 })
	var pid int
	if err := probe.QueryRow(t.Context(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	resume := pause(t, pid)
	var err error
	limit := bound + cancelGiveUp + 3*time.Second
	select {
	case err = <-errc:
	case <-time.After(limit):
		resume()
		t.Fatalf("AcquireAll still running %v after its backend was paused", limit)
	}
	resume()
	if !errors.Is(err, lock.ErrCleanupPending) || !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireAll whose hold-wait cancel went unanswered = %v; want lock.ErrUnavailable with lock.ErrCleanupPending, not the deadline", err)
	}
	// Resumed, the backend finds its socket closed and frees what it held.
	locktest.MustRelease(t, held)
	locktest.MustRelease(t, locktest.MustAcquire(t, a, keys[0]))
}

// privateDatabase starts a Postgres cluster of the test's own, whose
// backends a test may pause, and returns the URL of a database in it.
func privateDatabase(t *testing.T) string {
	t.Helper()
	pg, err := stack.StartPostgres(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	url, err := pg.CreateDatabase(t.Context(), "pglock")
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// pause stops the backend pid (SIGSTOP) and returns what resumes it, once;
// the test's end resumes it too.
func pause(t *testing.T, pid int) func() {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := sync.OnceFunc(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	t.Cleanup(resume)
	return resume
}

// TestMixedAcquisitionsStress: three Lockers run lone Acquires, batches and
// AcquireAlls over a few keys, with deadlines of 0 to 40 ms, so that many
// waits and tries are cancelled in flight. No key is ever held twice, each
// key's tokens increase in holding order, every failure is the deadline
// (a cancel the server answers promptly leaves nothing behind, so never
// lock.ErrCleanupPending), and once everything is released nothing is left
// held on the server.
func TestMixedAcquisitionsStress(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	ls := []*Locker{newLocker(t, url), newLocker(t, url), newLocker(t, url)}
	probe := connect(t, url)
	base := locktest.Key(t)
	keys := []string{base + "-a", base + "-b", base + "-c", base + "-d", base + "-e"}
	var mu sync.Mutex
	inUse := map[string]bool{}
	lastToken := map[string]lock.Token{}
	take := func(set lock.Set) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range set {
			if inUse[l.Key()] {
				t.Errorf("%s held twice", l.Key())
			}
			inUse[l.Key()] = true
			if l.Token() <= lastToken[l.Key()] {
				t.Errorf("%s: token %d after %d", l.Key(), l.Token(), lastToken[l.Key()])
			}
			lastToken[l.Key()] = l.Token()
		}
	}
	free := func(set lock.Set) {
		mu.Lock()
		for _, l := range set {
			inUse[l.Key()] = false
		}
		mu.Unlock()
		if err := set.Release(context.Background()); err != nil {
			t.Error(err)
		}
	}
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 12 {
		l := ls[w%len(ls)]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 99))
			for range 40 {
				pick := slices.Clone(keys)
				r.Shuffle(len(pick), func(i, j int) { pick[i], pick[j] = pick[j], pick[i] })
				pick = pick[:1+r.IntN(len(keys))]
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(40))*time.Millisecond)
				var set lock.Set
				var err error
				switch r.IntN(3) {
				case 0:
					var lease *lock.Lease
					if lease, err = l.Acquire(ctx, pick[0]); err == nil {
						set = lock.Set{lease}
					}
				case 1:
					var b lock.Batch
					b, err = l.AcquireBatch(ctx, pick)
					set = b.Leases
				default:
					set, err = lock.AcquireAll(ctx, l, pick, lock.WithHoldWait(time.Duration(r.IntN(20))*time.Millisecond))
				}
				cancel()
				if err != nil {
					failed.Add(1)
					if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lock.ErrCleanupPending) {
						t.Errorf("unexpected error: %v", err)
					}
					continue
				}
				ok.Add(1)
				take(set)
				time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
				free(set)
			}
		})
	}
	wg.Wait()
	t.Logf("%d acquisitions, %d past their deadline", ok.Load(), failed.Load())
	waitFor(t, "no advisory lock held", func() bool { return heldAdvisory(t, probe) == 0 })
	for _, k := range keys {
		locktest.MustRelease(t, locktest.MustAcquire(t, ls[0], k, lock.TryOnce()))
	}
}

// heldAdvisory counts the granted advisory locks in the database.
func heldAdvisory(tb testing.TB, c *pgx.Conn) int {
	tb.Helper()
	var n int
	err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()`).Scan(&n)
	if err != nil {
		tb.Fatalf("count held advisory locks: %v", err)
	}
	return n
}

package pglock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	neturl "net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// newLocker returns a Locker on the database at url, closed when the test ends.
func newLocker(tb testing.TB, url string, opts ...Option) *Locker {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts = append([]Option{WithLogger(slog.New(slog.NewTextHandler(tWriter{tb}, nil)))}, opts...)
	l, err := New(ctx, url, opts...)
	if err != nil {
		tb.Fatalf("pglock.New: %v", err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// tWriter sends the Locker's log to the test's log, where it shows only on failure.
type tWriter struct{ tb testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(p))
	return len(p), nil
}

// connect opens a plain connection, the "other client" of the tests.
func connect(tb testing.TB, url string) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// terminate ends the session holding lease from another connection, as an
// operator's pg_terminate_backend or a server restart would.
func terminate(t *testing.T, url string, lease *lock.Lease) {
	t.Helper()
	c := connect(t, url)
	var n int
	err := c.QueryRow(context.Background(),
		`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`,
		leaseAppName(lease.ID())).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("terminate the session of lease %s: %d sessions, %v", lease.ID(), n, err)
	}
}

// lockWaiters counts sessions of this database queued for an advisory lock.
func lockWaiters(tb testing.TB, c *pgx.Conn) int {
	tb.Helper()
	var n int
	err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()`).Scan(&n)
	if err != nil {
		tb.Fatalf("count lock waiters: %v", err)
	}
	return n
}

func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("still waiting after 5 s for %s", what)
		}
	}
}

func TestConformance(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	locktest.Run(t, locktest.Config{
		New:         func(tb testing.TB) lock.Locker { return newLocker(tb, url) },
		Exclusive:   true,
		FIFO:        true,
		Distributed: true,
		Expiring:    true,
		Lose:        func(t *testing.T, _ lock.Locker, lease *lock.Lease) { terminate(t, url, lease) },
	})
}

// TestExclusionAcrossLockers is three service instances with 16 workers
// between them on one key: never two holders, and each holder's token is
// above its predecessor's.
func TestExclusionAcrossLockers(t *testing.T) {
	const instances, workers, rounds = 3, 16, 20
	url := stacktest.NewDatabase(t, t.Context())
	ls := make([]*Locker, instances)
	for i := range ls {
		ls[i] = newLocker(t, url)
	}
	key := locktest.Key(t)
	var holders atomic.Int32
	var last lock.Token // written only under the lock: the race detector sees any overlap
	counter := 0
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				lease, err := ls[w%instances].Acquire(ctx, key)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if h := holders.Add(1); h != 1 {
					errs <- fmt.Errorf("%d holders at once", h)
				}
				if lease.Token() <= last {
					errs <- fmt.Errorf("token %d after %d", lease.Token(), last)
				}
				last = lease.Token()
				counter++
				holders.Add(-1)
				if err := lease.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if counter != workers*rounds {
		t.Fatalf("counter = %d, want %d", counter, workers*rounds)
	}
}

// TestCancelledWaitLeavesNoWaiter checks the server side: once Acquire has
// returned the context's error, its session is out of the lock queue, so the
// next acquirer gets the key at once.
func TestCancelledWaitLeavesNoWaiter(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	a, b, c := newLocker(t, url), newLocker(t, url), newLocker(t, url)
	probe := connect(t, url)
	key := locktest.Key(t)
	held := locktest.MustAcquire(t, a, key)

	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := b.Acquire(ctx, key)
			errc <- err
		}()
		waitFor(t, "the acquirer to queue on the server", func() bool { return lockWaiters(t, probe) == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire = %v, want context.Canceled", err)
		}
		if n := lockWaiters(t, probe); n != 0 {
			t.Fatalf("%d sessions still queued after Acquire returned", n)
		}
	}

	// Eight waiters whose deadline passes together.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if _, err := b.Acquire(ctx, key); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acquire past its deadline = %v, want DeadlineExceeded", err)
			}
		})
	}
	wg.Wait()
	if n := lockWaiters(t, probe); n != 0 {
		t.Fatalf("%d sessions still queued after the deadlines", n)
	}
	locktest.MustRelease(t, held)
	locktest.MustRelease(t, locktest.MustAcquire(t, c, key, lock.TryOnce()))
}

// TestCancelAtGrant races a release against the cancellation of the next
// waiter: whichever wins, the waiter either holds a working lease or left
// nothing behind.
func TestCancelAtGrant(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	a, b, c := newLocker(t, url), newLocker(t, url), newLocker(t, url)
	probe := connect(t, url)
	key := locktest.Key(t)
	for i := range 20 {
		held := locktest.MustAcquire(t, a, key)
		ctx, cancel := context.WithCancel(context.Background())
		type result struct {
			lease *lock.Lease
			err   error
		}
		res := make(chan result, 1)
		go func() {
			lease, err := b.Acquire(ctx, key)
			res <- result{lease, err}
		}()
		waitFor(t, "the acquirer to queue on the server", func() bool { return lockWaiters(t, probe) == 1 })
		go cancel()
		locktest.MustRelease(t, held)
		r := <-res
		if r.err == nil {
			locktest.MustRelease(t, r.lease)
		} else if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("round %d: Acquire = %v, want a lease or context.Canceled", i, r.err)
		}
		// A lock granted at the last moment dies with its session, which the
		// server ends a moment after the client closed it.
		locktest.MustRelease(t, locktest.MustAcquire(t, c, key, lock.WithTTL(time.Second)))
	}
}

// TestServerEndsSilentHolder is the chaos tests' premise without the
// client's help: a session that holds a lock and says nothing for the TTL is
// ended by the server, and the lock passes on.
func TestServerEndsSilentHolder(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	l := newLocker(t, url)
	silent := connect(t, url)
	key := locktest.Key(t)
	var token *int64
	err := silent.QueryRow(context.Background(), tryLockSQL, key, leaseAppName(uuid.New()), idleTimeout(300*time.Millisecond)).
		Scan(nil, nil, &token)
	if err != nil || token == nil {
		t.Fatalf("lock on the silent session: token %v, %v", token, err)
	}
	if _, err := l.Acquire(context.Background(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryOnce on a held key = %v, want ErrNotAcquired", err)
	}
	start := time.Now()
	lease := locktest.MustAcquire(t, l, key)
	if waited := time.Since(start); waited > 3*time.Second {
		t.Fatalf("waited %v for a 300 ms idle timeout", waited)
	}
	if lease.Token() <= lock.Token(*token) {
		t.Fatalf("token %d after the silent holder's %d", lease.Token(), *token)
	}
	locktest.MustRelease(t, lease)
}

// TestPooledSessionsOutliveTTL checks that released connections have their
// idle timeout disarmed: the server must not end pooled sessions.
func TestPooledSessionsOutliveTTL(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	l := newLocker(t, url, WithTTL(200*time.Millisecond))
	other := newLocker(t, url)
	key := locktest.Key(t)
	held := locktest.MustAcquire(t, other, key)
	if _, err := l.Acquire(context.Background(), key, lock.TryOnce()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryOnce = %v, want ErrNotAcquired", err)
	}
	locktest.MustRelease(t, held)
	locktest.MustRelease(t, locktest.MustAcquire(t, l, key))
	created := l.pool.Stat().NewConnsCount()
	time.Sleep(700 * time.Millisecond)

	probe := connect(t, url)
	var leases int
	if err := probe.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'stockguard-lease:%'`,
	).Scan(&leases); err != nil {
		t.Fatal(err)
	}
	if leases != 0 {
		t.Errorf("%d idle sessions still carry a lease's name", leases)
	}
	locktest.MustRelease(t, locktest.MustAcquire(t, l, key, lock.TryOnce()))
	if n := l.pool.Stat().NewConnsCount(); n != created {
		t.Errorf("pool opened %d new connections after idling: the server ended pooled sessions", n-created)
	}
}

func TestCloseEndsLeasesAndWaiters(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	a, b := newLocker(t, url), newLocker(t, url)
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, a, key)
	errc := make(chan error, 1)
	go func() {
		_, err := a.Acquire(context.Background(), key)
		errc <- err
	}()
	probe := connect(t, url)
	waitFor(t, "the acquirer to queue", func() bool { return lockWaiters(t, probe) == 1 })

	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := <-errc; !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("wait interrupted by Close = %v, want ErrUnavailable", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatal("lease still open after Close")
	}
	if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
		t.Errorf("Err() after Close = %v, want ErrLeaseLost", lease.Err())
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Errorf("Release after Close = %v", err)
	}
	if _, err := a.Acquire(context.Background(), key); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Acquire after Close = %v, want ErrUnavailable", err)
	}
	if err := a.Ping(context.Background()); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Ping after Close = %v, want ErrUnavailable", err)
	}
	locktest.MustRelease(t, locktest.MustAcquire(t, b, key))
}

func TestUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := New(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("New on a closed port = %v, want ErrUnavailable", err)
	}
}

func TestInvalidKeys(t *testing.T) {
	l := newLocker(t, stacktest.NewDatabase(t, t.Context()))
	for _, key := range []string{"", "a\x00b", "\xff\xfe"} {
		if _, err := l.Acquire(context.Background(), key); !errors.Is(err, lock.ErrInvalidKey) {
			t.Errorf("Acquire(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
}

func TestConcurrentSetup(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := New(ctx, url)
			if err != nil {
				t.Errorf("New racing 5 others: %v", err)
				return
			}
			_ = l.Close()
		})
	}
	wg.Wait()
}

func TestMetrics(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	reg := prometheus.NewPedanticRegistry()
	a := newLocker(t, url, WithRegisterer(reg), WithTTL(time.Second))
	b := newLocker(t, url, WithRegisterer(reg)) // shares the collectors
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, a, key)
	_, _ = b.Acquire(context.Background(), key, lock.TryOnce())
	_, _ = b.Acquire(context.Background(), "")
	terminate(t, url, lease)
	short := locktest.MustAcquire(t, a, locktest.Key(t), lock.WithTTL(50*time.Millisecond), lock.WithoutWatchdog())
	waitFor(t, "the leases to be lost", func() bool { return lease.Err() != nil && short.Err() != nil })
	locktest.MustRelease(t, lease)
	locktest.MustRelease(t, short)

	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "backend" && lp.GetValue() != "postgres" {
					t.Errorf("%s has backend=%q", name, lp.GetValue())
				}
				if lp.GetName() == "reason" {
					name += "/" + lp.GetValue()
				}
			}
			switch {
			case m.GetHistogram() != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				got[name] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{
		"stockguard_lock_acquire_seconds":                     2,
		"stockguard_lock_acquire_failures_total/not_acquired": 1,
		"stockguard_lock_acquire_failures_total/invalid_key":  1,
		"stockguard_lock_leases_lost_total":                   2,
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v (all: %v)", name, got[name], v, got)
		}
	}
}

// TestDeadPooledSessions: sessions ended behind the pool's back (a server
// restart, an operator) cost a retry, not a failed acquisition.
func TestDeadPooledSessions(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	l := newLocker(t, url)
	key := locktest.Key(t)
	var leases []*lock.Lease
	for i := range 2 {
		leases = append(leases, locktest.MustAcquire(t, l, fmt.Sprint(key, i)))
	}
	for _, lease := range leases {
		locktest.MustRelease(t, lease)
	}
	probe := connect(t, url)
	var n int
	if err := probe.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 1000))
		FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, poolAppName).Scan(&n); err != nil || n != 2 {
		t.Fatalf("terminate the pooled sessions: %d, %v", n, err)
	}
	locktest.MustRelease(t, locktest.MustAcquire(t, l, key, lock.TryOnce()))
}

// TestPingWithFullPool: readiness must not fail because every lock
// connection is busy holding or waiting, the normal state of a hot SKU.
func TestPingWithFullPool(t *testing.T) {
	l := newLocker(t, stacktest.NewDatabase(t, t.Context()), WithMaxConns(1))
	lease := locktest.MustAcquire(t, l, locktest.Key(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("Ping with the lock pool full: %v", err)
	}
	locktest.MustRelease(t, lease)
}

// TestServerEndedSessionLosesAtOnce: a session the server ends loses its
// lease when the server says so, not at the next keepalive (10 s away with
// a 30 s TTL), while the lease's deadline still looks valid.
func TestServerEndedSessionLosesAtOnce(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	l := newLocker(t, url, WithTTL(30*time.Second))
	lease := locktest.MustAcquire(t, l, locktest.Key(t))
	start := time.Now()
	terminate(t, url, lease)
	select {
	case <-lease.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("lease still open 3 s after the server ended its session")
	}
	if !errors.Is(lease.Err(), lock.ErrLeaseLost) {
		t.Fatalf("Err() = %v, want ErrLeaseLost", lease.Err())
	}
	t.Logf("lost %v after the session ended", time.Since(start))
	locktest.MustRelease(t, lease)
	if got := l.pool.Stat().AcquiredConns(); got != 0 {
		t.Fatalf("%d pooled connections still in use", got)
	}
}

// TestSilentServerAcquireReturnsAtDeadline: an Acquire waiting for a held
// key whose server then falls silent (a partition or a frozen host: the
// sockets stay open, nothing is answered, cancel requests included)
// returns about when its context ends, with lock.ErrCleanupPending, and
// not once its cancel gives up (cancelGiveUp later). The cancel goes on in
// the background and, once the server hears again, takes the waiter out
// of the key's line.
func TestSilentServerAcquireReturnsAtDeadline(t *testing.T) {
	p, holder, waiter, probe, key, held := heldBehindFreeze(t)

	took, err := acquireFrozen(t, p, probe, waiter, key)
	p.thaw()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrCleanupPending) {
		t.Fatalf("Acquire whose server fell silent = %v; want context.DeadlineExceeded with lock.ErrCleanupPending", err)
	}
	if took > silentDeadline+cancelGrace+500*time.Millisecond {
		t.Fatalf("Acquire with a %v deadline returned after %v", silentDeadline, took)
	}
	waitFor(t, "the background cancel to take the waiter out of the line", func() bool { return lockWaiters(t, probe) == 0 })
	// Its session was the clean-up's to close: it never goes back to the pool.
	waitFor(t, "the waiter's connection closed", func() bool { return waiter.pool.Stat().TotalConns() == 0 })
	locktest.MustRelease(t, held)
	locktest.MustRelease(t, locktest.MustAcquire(t, holder, key, lock.TryOnce()))
}

// TestSilentServerBatchReturnsAtDeadline: the same for AcquireBatch, whose
// statement goes to a server already silent; once the server hears again,
// the statement it then runs takes nothing for good: the background clean-up
// closes its session.
func TestSilentServerBatchReturnsAtDeadline(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	p := newFreezeProxy(t, url)
	l, other := newLocker(t, p.url), newLocker(t, url)
	base := locktest.Key(t)
	keys := []string{base + "-1", base + "-2"}
	// A pooled connection, its statements prepared, is what meets the silence.
	_ = locktest.MustBatch(t, l, keys).Leases.Release(context.Background())

	p.freeze()
	const deadline = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	b, err := l.AcquireBatch(ctx, keys)
	took := time.Since(start)
	p.thaw()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrCleanupPending) || b.Leases != nil {
		t.Fatalf("AcquireBatch whose server fell silent = %v, %v; want context.DeadlineExceeded with lock.ErrCleanupPending", b, err)
	}
	if took > deadline+cancelGrace+500*time.Millisecond {
		t.Fatalf("AcquireBatch with a %v deadline returned after %v", deadline, took)
	}
	for _, k := range keys {
		locktest.MustRelease(t, locktest.MustAcquire(t, other, k))
	}
}

// TestReleaseDuringSilentKeepaliveReturnsAtDeadline: a lease released
// while its keepalive waits on a server fallen silent returns about when
// the release's context ends, not at the lease's deadline (TTL*2/3 later at
// the watchdog's step), with lock.ErrCleanupPending: the session is ended
// instead, its socket closed, so the batch's other lease on it is lost
// (and its release harmless), and once the server hears again both keys
// are free.
func TestReleaseDuringSilentKeepaliveReturnsAtDeadline(t *testing.T) {
	const ttl = 3 * time.Second
	url := stacktest.NewDatabase(t, t.Context())
	p := newFreezeProxy(t, url)
	l, other := newLocker(t, p.url, WithTTL(ttl)), newLocker(t, url)
	base := locktest.Key(t)
	keys := []string{base + "-1", base + "-2"}
	b := locktest.MustBatch(t, l, keys)
	s := liveSession(t, l)
	// The watchdog extends at TTL/3: freeze just before.
	time.Sleep(ttl/3 - 100*time.Millisecond)
	p.freeze()
	defer p.thaw()
	waitFor(t, "the keepalive's statement in flight", func() bool { return busy(s) })

	const deadline = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := b.Leases[0].Release(ctx)
	took := time.Since(start)
	if took > deadline+cancelGrace {
		t.Fatalf("Release with a %v deadline, a keepalive in flight to a silent server, returned after %v: %v", deadline, took, err)
	}
	if !errors.Is(err, lock.ErrCleanupPending) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release during a keepalive to a silent server = %v; want context.DeadlineExceeded with lock.ErrCleanupPending", err)
	}
	rest := b.Leases[1]
	select {
	case <-rest.Done():
	case <-time.After(time.Second):
		t.Fatal("the session's other lease still open after its session was ended")
	}
	if !errors.Is(rest.Err(), lock.ErrLeaseLost) {
		t.Fatalf("the session's other lease: Err() = %v, want ErrLeaseLost", rest.Err())
	}
	locktest.MustRelease(t, rest)

	p.thaw()
	for _, k := range keys {
		waitFor(t, k+" free for another instance", func() bool {
			lease, err := other.Acquire(context.Background(), k, lock.TryOnce())
			if err != nil {
				return false
			}
			locktest.MustRelease(t, lease)
			return true
		})
	}
	if got := l.pool.Stat().AcquiredConns(); got != 0 {
		t.Fatalf("%d pooled connections still in use", got)
	}
}

// liveSession is l's only session.
func liveSession(t *testing.T, l *Locker) *session {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.live) != 1 {
		t.Fatalf("%d live sessions, want 1", len(l.live))
	}
	for s := range l.live {
		return s
	}
	return nil
}

// busy reports whether a statement, or a release or an end, has s's turn.
func busy(s *session) bool { return len(s.turn) == 1 }

// heldElsewhere reports whether other cannot take key at once.
func heldElsewhere(t *testing.T, other *Locker, key string) bool {
	t.Helper()
	lease, err := other.Acquire(context.Background(), key, lock.TryOnce())
	if err != nil {
		return true
	}
	locktest.MustRelease(t, lease)
	return false
}

// TestReleaseToSilentServerReportsCleanupPending: a release whose unlock
// to a server fallen silent is cut short by its context ends the session,
// but the server holds the key until it hears the socket close: Release
// says so with lock.ErrCleanupPending and the context's error, not nil.
func TestReleaseToSilentServerReportsCleanupPending(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	p := newFreezeProxy(t, url)
	l, other := newLocker(t, p.url, WithTTL(10*time.Second)), newLocker(t, url)
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, l, key)
	p.freeze()
	defer p.thaw()

	const deadline = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := lease.Release(ctx)
	if took := time.Since(start); took > deadline+cancelGrace {
		t.Fatalf("Release with a %v deadline to a silent server returned after %v: %v", deadline, took, err)
	}
	if !errors.Is(err, lock.ErrCleanupPending) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release to a silent server = %v; want context.DeadlineExceeded with lock.ErrCleanupPending", err)
	}
	if !heldElsewhere(t, other, key) {
		t.Fatal("the silent server freed the key before hearing the socket close; the test proves nothing")
	}
	p.thaw()
	waitFor(t, "the key free once the server hears", func() bool { return !heldElsewhere(t, other, key) })
}

// TestReleaseOutlastingSilentKeepaliveReportsCleanupPending: a release
// whose context outlasts the lease's deadline waits for the keepalive in
// flight to a silent server, which fails at that deadline and ends the
// session; the key is held until the server hears the socket close, so
// Release wraps lock.ErrCleanupPending.
func TestReleaseOutlastingSilentKeepaliveReportsCleanupPending(t *testing.T) {
	const ttl = 3 * time.Second
	url := stacktest.NewDatabase(t, t.Context())
	p := newFreezeProxy(t, url)
	l, other := newLocker(t, p.url, WithTTL(ttl)), newLocker(t, url)
	key := locktest.Key(t)
	lease := locktest.MustAcquire(t, l, key)
	s := liveSession(t, l)
	// The watchdog extends at TTL/3: freeze just before.
	time.Sleep(ttl/3 - 100*time.Millisecond)
	p.freeze()
	defer p.thaw()
	waitFor(t, "the keepalive's statement in flight", func() bool { return busy(s) })

	ctx, cancel := context.WithTimeout(context.Background(), 2*ttl)
	defer cancel()
	err := lease.Release(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Release outlived its context: %v", err)
	}
	if !errors.Is(err, lock.ErrCleanupPending) {
		t.Fatalf("Release after a keepalive to a silent server failed = %v; want lock.ErrCleanupPending", err)
	}
	if !heldElsewhere(t, other, key) {
		t.Fatal("the silent server freed the key before hearing the socket close; the test proves nothing")
	}
	p.thaw()
	waitFor(t, "the key free once the server hears", func() bool { return !heldElsewhere(t, other, key) })
}

// TestReleaseAbortedBySiblingReportsCleanupPending: two leases of one
// session released at once while the server is silent. The impatient one
// (short context) ends the session, which aborts the other's unlock in
// flight: that release, its own context still running, reports
// lock.ErrCleanupPending (the key is held until the server hears), not a
// cancellation that is not its caller's.
func TestReleaseAbortedBySiblingReportsCleanupPending(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	p := newFreezeProxy(t, url)
	l, other := newLocker(t, p.url, WithTTL(10*time.Second)), newLocker(t, url)
	base := locktest.Key(t)
	keys := []string{base + "-1", base + "-2"}
	b := locktest.MustBatch(t, l, keys)
	s := liveSession(t, l)
	p.freeze()
	defer p.thaw()

	patient := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := b.Leases[1].Release(ctx)
		if ctx.Err() != nil {
			err = fmt.Errorf("returned only at its own deadline: %w", err)
		}
		patient <- err
	}()
	waitFor(t, "the patient release's unlock in flight", func() bool { return busy(s) })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := b.Leases[0].Release(ctx); !errors.Is(err, lock.ErrCleanupPending) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("impatient Release = %v; want context.DeadlineExceeded with lock.ErrCleanupPending", err)
	}
	err := <-patient
	if !errors.Is(err, lock.ErrCleanupPending) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("patient Release, its unlock aborted by the other's = %v; want lock.ErrCleanupPending and no context error", err)
	}
	if !heldElsewhere(t, other, keys[1]) {
		t.Fatal("the silent server freed the key before hearing the socket close; the test proves nothing")
	}
	p.thaw()
	for _, k := range keys {
		waitFor(t, k+" free once the server hears", func() bool { return !heldElsewhere(t, other, k) })
	}
}

// TestCloseEndsBackgroundCancels: Close neither leaves behind nor waits
// out (up to cancelGiveUp) the cancel an acquisition left to the
// background: it closes that connection and returns at once.
func TestCloseEndsBackgroundCancels(t *testing.T) {
	p, _, waiter, probe, key, held := heldBehindFreeze(t)
	defer locktest.MustRelease(t, held)

	took, err := acquireFrozen(t, p, probe, waiter, key)
	if !errors.Is(err, lock.ErrCleanupPending) || took > silentDeadline+cancelGrace+500*time.Millisecond {
		t.Fatalf("Acquire whose server fell silent = %v after %v; want lock.ErrCleanupPending at its deadline", err, took)
	}
	start := time.Now()
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Close took %v with a cancel running in the background", d)
	}
	if n := waiter.pool.Stat().TotalConns(); n != 0 {
		t.Fatalf("%d connections left after Close", n)
	}
}

// TestHoldWaitOutlastsHiccupAtItsBound: an AcquireAll past its hold-wait
// bound, its context alive for seconds more, meets a network hiccup of
// under a second as it cancels its wait. It waits for the cancel's answer,
// then for the key holding nothing, and gets its keys: cancelGrace is for
// a caller whose own context ended, not for the hold-wait bound.
func TestHoldWaitOutlastsHiccupAtItsBound(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	p := newFreezeProxy(t, url)
	a, b := newLocker(t, url), newLocker(t, p.url)
	probe := connect(t, url)
	base := locktest.Key(t)
	keys := []string{base + "-0", base + "-1"}
	held := locktest.MustAcquire(t, a, keys[1])
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	const bound = 500 * time.Millisecond
	type result struct {
		set lock.Set
		err error
		at  time.Duration
	}
	start := time.Now()
	res := make(chan result, 1)
	go func() {
		set, err := lock.AcquireAll(ctx, b, keys, lock.WithHoldWait(bound))
		res <- result{set, err, time.Since(start)}
	}()
	waitFor(t, "the waiter queued", func() bool { return lockWaiters(t, probe) == 1 })
	// The hiccup: from just before the bound until 700 ms past it.
	p.freeze()
	time.Sleep(time.Until(start.Add(bound + 700*time.Millisecond)))
	p.thaw()
	time.Sleep(time.Second)
	locktest.MustRelease(t, held)
	r := <-res
	if r.err != nil {
		t.Fatalf("AcquireAll (ctx 15 s) after a 700 ms hiccup at its hold-wait bound failed after %v: %v", r.at, r.err)
	}
	if err := r.set.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestCancelRequestInFlightBoundedByGrace: the wait is granted just past
// the deadline, while the cancel request in flight hangs (its connection
// is never answered). Acquire still returns within cancelGrace, with
// lock.ErrCleanupPending: a request that lands later could cancel the
// connection's next statement, so the connection is never used again, and
// the session's key is freed.
func TestCancelRequestInFlightBoundedByGrace(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	p := newFreezeProxy(t, url)
	a, b := newLocker(t, url), newLocker(t, p.url)
	probe := connect(t, url)
	key := locktest.Key(t)
	held := locktest.MustAcquire(t, a, key)
	const deadline = 700 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		lease, err := b.Acquire(ctx, key)
		if lease != nil {
			t.Errorf("lease handed out past the deadline")
		}
		errc <- err
	}()
	waitFor(t, "the waiter queued", func() bool { return lockWaiters(t, probe) == 1 })
	p.stallNew()
	time.Sleep(time.Until(start.Add(deadline + 40*time.Millisecond)))
	locktest.MustRelease(t, held)
	err := <-errc
	took := time.Since(start)
	if limit := deadline + cancelGrace + 200*time.Millisecond; took > limit {
		t.Fatalf("Acquire with a %v deadline, granted 40 ms past it, returned after %v (> %v): %v", deadline, took, limit, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrCleanupPending) {
		t.Fatalf("Acquire = %v; want context.DeadlineExceeded with lock.ErrCleanupPending", err)
	}
	waitFor(t, "the connection closed", func() bool { return b.pool.Stat().TotalConns() == 0 })
	// The server ends the session it was granted to once it reads the
	// closed socket, a moment after our side closed it.
	waitFor(t, "the given-up session's lock freed", func() bool { return heldAdvisory(t, probe) == 0 })
	locktest.MustRelease(t, locktest.MustAcquire(t, a, key, lock.TryOnce()))
}

// TestGrantedAfterCallerLeftIsFreed: the key is granted to a wait whose
// caller already left (its server silent past cancelGrace). The caller
// holds no lease and is told lock.ErrCleanupPending; once the server hears
// again the background closes the session, the key is free and no
// connection stays.
func TestGrantedAfterCallerLeftIsFreed(t *testing.T) {
	p, holder, waiter, probe, key, held := heldBehindFreeze(t)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		lease, err := waiter.Acquire(ctx, key)
		if lease != nil {
			t.Errorf("lease handed out: %v", lease.Key())
		}
		errc <- err
	}()
	waitFor(t, "the waiter queued", func() bool { return lockWaiters(t, probe) == 1 })
	p.freeze()
	locktest.MustRelease(t, held) // the frozen waiter's backend is granted the key
	err := <-errc
	if !errors.Is(err, lock.ErrCleanupPending) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v; want context.DeadlineExceeded with lock.ErrCleanupPending", err)
	}
	if n := heldAdvisory(t, probe); n != 1 {
		t.Fatalf("%d advisory locks held while frozen; want the abandoned session's 1", n)
	}
	p.thaw()
	waitFor(t, "the abandoned session closed", func() bool { return heldAdvisory(t, probe) == 0 })
	waitFor(t, "its connection gone", func() bool { return waiter.pool.Stat().TotalConns() == 0 })
	locktest.MustRelease(t, locktest.MustAcquire(t, holder, key, lock.TryOnce()))
}

// TestShortDeadlinesLeaveNothingRunning: lone Acquires, batches and
// AcquireAlls with deadlines of 0 to 15 ms on contended keys, the server
// answering: almost never lock.ErrCleanupPending, and afterwards every
// goroutine of send has ended, every connection is back and nothing is
// held.
func TestShortDeadlinesLeaveNothingRunning(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	l, other := newLocker(t, url), newLocker(t, url)
	probe := connect(t, url)
	base := locktest.Key(t)
	keys := []string{base + "-a", base + "-b", base + "-c", base + "-d"}
	hot := locktest.MustAcquire(t, other, keys[3]) // always held: waits on it end at their deadline
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	var pending atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range 60 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(16))*time.Millisecond)
				var set lock.Set
				var err error
				switch r.IntN(3) {
				case 0:
					var lease *lock.Lease
					if lease, err = l.Acquire(ctx, keys[r.IntN(len(keys))]); err == nil {
						set = lock.Set{lease}
					}
				case 1:
					var b lock.Batch
					b, err = l.AcquireBatch(ctx, keys)
					set = b.Leases
				default:
					set, err = lock.AcquireAll(ctx, l, keys[r.IntN(3):], lock.WithHoldWait(time.Duration(r.IntN(5))*time.Millisecond))
				}
				cancel()
				if errors.Is(err, lock.ErrCleanupPending) {
					pending.Add(1)
					t.Logf("cleanup pending: %v", err)
				}
				if set != nil {
					_ = set.Release(context.Background())
				}
			}
		})
	}
	wg.Wait()
	// A cancel is a connection of its own, and Postgres forks a backend
	// for it: on two cores busy with the rest of `make test` one now and
	// then takes longer than cancelGrace (4 of 480 calls once, the
	// clean-up then finishing in the background as it should). A cancel
	// that did not work would leave most of these calls pending.
	if n, calls := pending.Load(), int64(8*60); n > calls/40 {
		t.Errorf("%d of %d calls ErrCleanupPending with a server that answers", n, calls)
	}
	locktest.MustRelease(t, hot)
	waitFor(t, "connections back", func() bool { return l.pool.Stat().AcquiredConns() == 0 })
	waitFor(t, "goroutines back", func() bool { return runtime.NumGoroutine() <= before+2 })
	waitFor(t, "nothing held", func() bool { return heldAdvisory(t, probe) == 0 })
}

// TestCloseMeetsCancelsInEveryPhase: lone and multi-key waits through a
// proxy that freezes, with staggered deadlines, so that Close meets
// callers in every phase (still waiting, within cancelGrace, left to the
// background). Close returns promptly and leaves no connection, and once
// the server hears again nothing is left held or queued within a moment.
func TestCloseMeetsCancelsInEveryPhase(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	for round := range 3 {
		p := newFreezeProxy(t, url)
		holder, waiter := newLocker(t, url), newLocker(t, p.url)
		probe := connect(t, url)
		base := locktest.Key(t)
		keys := []string{base + "-0", base + "-1"}
		held := locktest.MustAcquire(t, holder, keys[1])
		const n = 8
		var wg sync.WaitGroup
		start := time.Now()
		for i := range n {
			d := 300*time.Millisecond + time.Duration(i)*90*time.Millisecond
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				var err error
				if i%2 == 0 {
					var lease *lock.Lease
					if lease, err = waiter.Acquire(ctx, keys[1]); lease != nil {
						t.Errorf("lease on a held key")
					}
				} else {
					var set lock.Set
					if set, err = lock.AcquireAll(ctx, waiter, keys, lock.WithHoldWait(time.Duration(i)*20*time.Millisecond)); set != nil {
						t.Errorf("set on a held key")
					}
				}
				if err == nil {
					t.Errorf("no error")
				}
			})
		}
		waitFor(t, "waiters queued", func() bool { return lockWaiters(t, probe) >= n/2 })
		p.freeze()
		time.Sleep(time.Until(start.Add(time.Duration(500+round*150) * time.Millisecond)))
		closing := time.Now()
		if err := waiter.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(closing); d > 1500*time.Millisecond {
			t.Errorf("round %d: Close took %v", round, d)
		}
		wg.Wait()
		if c := waiter.pool.Stat().TotalConns(); c != 0 {
			t.Errorf("round %d: %d connections after Close", round, c)
		}
		p.thaw()
		locktest.MustRelease(t, held)
		waitFor(t, "nothing held or queued after the thaw", func() bool { return heldAdvisory(t, probe) == 0 && lockWaiters(t, probe) == 0 })
	}
}

// TestGivenUpSocketClosedAtOnce: a wait whose server stays silent past
// cancelGiveUp has its socket closed then, not once pgx's own cancel
// request to the silent server has timed out (15 s later): the server,
// once it hears again, ends the session at once.
func TestGivenUpSocketClosedAtOnce(t *testing.T) {
	p, _, waiter, probe, key, held := heldBehindFreeze(t)
	defer locktest.MustRelease(t, held)
	start := time.Now()
	if _, err := acquireFrozen(t, p, probe, waiter, key); !errors.Is(err, lock.ErrCleanupPending) {
		t.Fatalf("Acquire = %v; want lock.ErrCleanupPending", err)
	}
	time.Sleep(time.Until(start.Add(silentDeadline + cancelGiveUp)))
	waitFor(t, "the cancel given up", func() bool { return waiter.pool.Stat().TotalConns() == 0 })
	p.thaw()
	waitFor(t, "the given-up session gone from the queue", func() bool { return lockWaiters(t, probe) == 0 })
}

// TestCloseClosesGivenUpSockets: Close ends a cancel left to the
// background by closing its socket, and also the cancel request pgx sends
// on its own for a connection it gave up, which a silent server would hold
// for 15 s: nothing of the Locker outlives Close, and the server, once it
// hears again, ends the session at once.
func TestCloseClosesGivenUpSockets(t *testing.T) {
	p, _, waiter, probe, key, held := heldBehindFreeze(t)
	defer locktest.MustRelease(t, held)
	if _, err := acquireFrozen(t, p, probe, waiter, key); !errors.Is(err, lock.ErrCleanupPending) {
		t.Fatalf("Acquire = %v; want lock.ErrCleanupPending", err)
	}
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pgx's own cancel requests ended", func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "pgconn.(*PgConn).asyncClose.func1(")
	})
	p.thaw()
	waitFor(t, "the given-up session gone from the queue", func() bool { return lockWaiters(t, probe) == 0 })
}

// heldBehindFreeze sets the scene of the silent-server tests: a key held
// by holder, and waiter, which reaches a fresh database through the freeze
// proxy p; probe is a connection of the database's own to look at it with.
func heldBehindFreeze(t *testing.T) (p *freezeProxy, holder, waiter *Locker, probe *pgx.Conn, key string, held *lock.Lease) {
	t.Helper()
	url := stacktest.NewDatabase(t, t.Context())
	p = newFreezeProxy(t, url)
	holder, waiter = newLocker(t, url), newLocker(t, p.url)
	probe = connect(t, url)
	key = locktest.Key(t)
	return p, holder, waiter, probe, key, locktest.MustAcquire(t, holder, key)
}

// silentDeadline is the deadline of the acquisitions acquireFrozen makes.
const silentDeadline = time.Second

// acquireFrozen has l wait for key, held elsewhere, freezes p, l's way to
// the server, once the wait is queued (probe sees it), and returns
// how long Acquire, with a silentDeadline deadline, took, and its error.
func acquireFrozen(t *testing.T, p *freezeProxy, probe *pgx.Conn, l *Locker, key string) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), silentDeadline)
	defer cancel()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, key)
		errc <- err
	}()
	waitFor(t, "the waiter queued on the server", func() bool { return lockWaiters(t, probe) == 1 })
	p.freeze()
	err := <-errc
	return time.Since(start), err
}

// TestPartitionedHolderToldFirst: a holder cut off from the server (all its
// traffic held back, sockets open) is told its leases are lost (Done)
// before the server frees the keys for another instance, a lone lease's and
// a batch's alike.
func TestPartitionedHolderToldFirst(t *testing.T) {
	url := stacktest.NewDatabase(t, t.Context())
	p := newFreezeProxy(t, url)
	holder, other := newLocker(t, p.url, WithTTL(time.Second)), newLocker(t, url)
	key := locktest.Key(t)
	lone := locktest.MustAcquire(t, holder, key)
	b := locktest.MustBatch(t, holder, []string{key + "-b1", key + "-b2"})
	leases := append(lock.Set{lone}, b.Leases...)
	p.freeze()
	defer p.thaw()
	var wg sync.WaitGroup
	for _, held := range leases {
		wg.Go(func() {
			taken := locktest.MustAcquire(t, other, held.Key())
			select {
			case <-held.Done():
			default:
				t.Errorf("%s taken by another instance while its partitioned holder still held it", held.Key())
			}
			locktest.MustRelease(t, taken)
		})
	}
	wg.Wait()
	for _, held := range leases {
		if !errors.Is(held.Err(), lock.ErrLeaseLost) {
			t.Errorf("%s: Err() = %v, want ErrLeaseLost", held.Key(), held.Err())
		}
	}
}

// freezeProxy forwards TCP to a Postgres server until freeze, after which
// it forwards nothing in either direction until thaw, and never connects a
// connection accepted meanwhile: a partition, or a frozen host. Sockets
// stay open throughout. After stallNew it never connects a new connection
// but goes on forwarding those it joined: a cancel request lost on its way
// while the session's socket works.
type freezeProxy struct {
	url     string // the database's URL through the proxy
	frozen  atomic.Bool
	stalled atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

// newFreezeProxy starts a proxy to the server of the database at dbURL,
// stopped when the test ends.
func newFreezeProxy(t *testing.T, dbURL string) *freezeProxy {
	t.Helper()
	u, err := neturl.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	u.Host = ln.Addr().String()
	p := &freezeProxy{url: u.String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.track(c)
			go p.connect(c, target)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *freezeProxy) freeze()   { p.frozen.Store(true) }
func (p *freezeProxy) thaw()     { p.frozen.Store(false) }
func (p *freezeProxy) stallNew() { p.stalled.Store(true) }

// hold returns once the proxy is not frozen.
func (p *freezeProxy) hold() {
	for p.frozen.Load() {
		time.Sleep(5 * time.Millisecond)
	}
}

func (p *freezeProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

// connect joins c to the server, unless the proxy is frozen or stalls new
// connections: then c is left unanswered for good, as a connection attempt
// lost in a partition.
func (p *freezeProxy) connect(c net.Conn, target string) {
	if p.frozen.Load() || p.stalled.Load() {
		return
	}
	s, err := net.Dial("tcp", target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.track(s)
	go p.pipe(c, s)
	go p.pipe(s, c)
}

// pipe copies src to dst, holding what it read while the proxy is frozen,
// and passes src's end on to dst.
func (p *freezeProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.hold()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

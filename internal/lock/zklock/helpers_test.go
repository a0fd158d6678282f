package zklock

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/locktest"
	"github.com/stockguard/stockguard/internal/lock/zklock/zkwire"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// testRoot keeps this package's tests apart from a service sharing the stack.
const testRoot = "/stockguard-test/locks"

// mustLocker returns a Locker on servers with the test root, closed when
// the test ends.
func mustLocker(tb testing.TB, servers []string, opts ...Option) *Locker {
	tb.Helper()
	l, err := New(servers, append([]Option{WithRoot(testRoot)}, opts...)...)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// inspector is a plain client, separate from any Locker, for looking at
// what the Lockers left on the servers.
func inspector(tb testing.TB, servers []string) *zk.Conn {
	tb.Helper()
	c, _, err := zk.Connect(servers, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		tb.Fatalf("inspector: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// children lists a key's waiter nodes; a missing parent counts as none.
func children(tb testing.TB, c *zk.Conn, key string) []string {
	tb.Helper()
	syncWith(tb, c)
	names, _, err := c.Children(testRoot + "/" + key)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		tb.Fatalf("children of %s: %v", key, err)
	}
	return names
}

// exists reports whether path exists, as of the leader's latest write.
func exists(tb testing.TB, c *zk.Conn, path string) (bool, *zk.Stat) {
	tb.Helper()
	syncWith(tb, c)
	ok, st, err := c.Exists(path)
	if err != nil {
		tb.Fatalf("exists %s: %v", path, err)
	}
	return ok, st
}

// syncWith makes the inspector's server catch up with the leader: a read
// from another client may otherwise miss a write that was already answered.
func syncWith(tb testing.TB, c *zk.Conn) {
	tb.Helper()
	if _, err := c.Sync("/"); err != nil {
		tb.Fatalf("sync: %v", err)
	}
}

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expireSession ends a session from outside (zkwire.ExpireSession): its
// ephemeral nodes go at once, and its first client learns on reconnecting
// that it expired.
func expireSession(tb testing.TB, addr string, id int64, passwd []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := zkwire.ExpireSession(ctx, addr, id, passwd); err != nil {
		tb.Fatal(err)
	}
}

// expireLocker ends l's current session from outside, with the
// credentials the Locker reports (SessionCredentials) presented to the
// first server: a takeover moves the session to whichever server it asks.
func expireLocker(tb testing.TB, servers []string, l lock.Locker) {
	tb.Helper()
	id, passwd, ok := l.(*Locker).SessionCredentials()
	if !ok {
		tb.Fatal("expire: the Locker reports no session")
	}
	expireSession(tb, servers[0], id, passwd)
}

// counter reads one counter or gauge from reg, summed over its labels.
func counter(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// sharedZK returns the shared stack's ensemble, failing with the command
// that starts it when it is not up.
func sharedZK(tb testing.TB) []string {
	tb.Helper()
	return stacktest.RequireZK(tb)
}

// key is a fresh key for one test.
func key(tb testing.TB) string { return locktest.Key(tb) }

func mustAcquire(tb testing.TB, l lock.Locker, key string, opts ...lock.Option) *lock.Lease {
	tb.Helper()
	return locktest.MustAcquire(tb, l, key, opts...)
}

func mustRelease(tb testing.TB, lease *lock.Lease) {
	tb.Helper()
	locktest.MustRelease(tb, lease)
}

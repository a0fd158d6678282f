package etcdlock

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// testTTL keeps lost sessions short-lived in tests; the servers of the
// stack (500 ms elections) grant it as asked.
const testTTL = 2 * time.Second

// mustLocker returns a Locker on the shared stack's cluster, closed when the
// test ends.
func mustLocker(tb testing.TB, opts ...Option) *Locker {
	tb.Helper()
	l, err := New(stacktest.RequireEtcd(tb), append([]Option{WithSessionTTL(testTTL)}, opts...)...)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// inspector is a plain client, apart from any Locker, for looking at what
// the Lockers left in the cluster and for breaking their sessions.
func inspector(tb testing.TB) *clientv3.Client {
	tb.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: stacktest.RequireEtcd(tb), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatalf("inspector: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// waiters lists the keys under key's prefix, oldest first.
func waiters(tb testing.TB, c *clientv3.Client, key string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, prefix(key), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		tb.Fatalf("list %s: %v", prefix(key), err)
	}
	out := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = string(kv.Key)
	}
	return out
}

// sessionLease is the lease of l's current session (0 if none).
func sessionLease(l *Locker) clientv3.LeaseID {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return 0
	}
	return l.cur.id
}

// revoke ends l's session from outside, as an operator or an expiry would.
func revoke(tb testing.TB, c *clientv3.Client, l *Locker) {
	tb.Helper()
	id := sessionLease(l)
	if id == 0 {
		tb.Fatal("locker has no session to revoke")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Revoke(ctx, id); err != nil {
		tb.Fatalf("revoke lease %x: %v", id, err)
	}
}

// eventually polls cond every 10 ms for up to d.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

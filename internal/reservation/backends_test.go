package reservation_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/backends"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// networked are the backends whose locks live on servers of the local stack.
var networked = []string{"redis", "redlock", "zookeeper", "etcd", "postgres"}

// stackParams are the local stack's addresses, checked to answer; the
// postgres backend locks in the test's database (url), so its fence
// sequence is the test's alone.
func stackParams(t *testing.T, url string) backends.Params {
	t.Helper()
	return backends.Params{RedisAddrs: stacktest.RequireRedis(t), ZKServers: stacktest.RequireZK(t),
		EtcdEndpoints: stacktest.RequireEtcd(t), DatabaseURL: url, TTL: 5 * time.Second}
}

// newBackend builds the named backend's locker from the one table, closed
// when the test ends.
func newBackend(t *testing.T, name string, p backends.Params) lock.Locker {
	t.Helper()
	b, err := backends.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.New(context.Background(), p)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// recorder notes every key the Service asks its locker for, whichever
// form it uses, before passing the call on.
type recorder struct {
	lock.Locker

	mu   sync.Mutex
	keys []string
}

func (r *recorder) note(keys ...string) {
	r.mu.Lock()
	r.keys = append(r.keys, keys...)
	r.mu.Unlock()
}

// asked returns the keys asked for since the last call.
func (r *recorder) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys
	r.keys = nil
	return k
}

func (r *recorder) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	r.note(key)
	return r.Locker.Acquire(ctx, key, opts...)
}

func (r *recorder) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	r.note(keys...)
	return r.Locker.AcquireBatch(ctx, keys, opts...)
}

// multiRecorder keeps a MultiAcquirer one (pglock takes a multi-key
// operation's locks on one connection).
type multiRecorder struct {
	*recorder
	m lock.MultiAcquirer
}

func (r multiRecorder) AcquireAll(ctx context.Context, keys []string, opts ...lock.Option) (lock.Set, error) {
	r.note(keys...)
	return r.m.AcquireAll(ctx, keys, opts...)
}

// record wraps l; the recorder reads what was asked of the result.
func record(l lock.Locker) (lock.Locker, *recorder) {
	r := &recorder{Locker: l}
	if m, ok := l.(lock.MultiAcquirer); ok {
		return multiRecorder{r, m}, r
	}
	return r, r
}

// uniq is a fresh name part, so that a run never meets an earlier run's
// keys on the shared servers.
func uniq() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func contains(haystack []string, prefix func(string) bool) []string {
	var hit []string
	for _, k := range haystack {
		if prefix(k) {
			hit = append(hit, k)
		}
	}
	slices.Sort(hit)
	return slices.Compact(hit)
}

package redlock_test

import (
	"context"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/redlock"
	"github.com/stockguard/stockguard/internal/stack"
)

func TestMain(m *testing.M) {
	// The fault tests kill nodes on purpose; go-redis would log every
	// refused dial to stderr.
	goredis.SetLogger(quiet{})
	os.Exit(m.Run())
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// testNodeTimeout replaces the 50 ms default in tests (a test's own option
// still wins): with -race, on two cores, next to other packages' tests, a
// healthy node's reply can take longer than that, and a failure would be
// reported as a lost quorum.
const testNodeTimeout = time.Second

// newLocker returns a Locker over addrs, closed when the test ends.
func newLocker(tb testing.TB, addrs []string, opts ...redlock.Option) *redlock.Locker {
	tb.Helper()
	l, err := redlock.New(addrs, append([]redlock.Option{redlock.WithNodeTimeout(testNodeTimeout)}, opts...)...)
	if err != nil {
		tb.Fatalf("redlock.New: %v", err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// nodes are direct clients to each node, to check or tamper with keys.
type nodes []*goredis.Client

func rawClients(tb testing.TB, addrs []string) nodes {
	tb.Helper()
	var cs nodes
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{
			Addr: a, MaxRetries: -1, DisableIdentity: true,
			// A paused node must not stall the check for long.
			DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond,
		})
		tb.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// lockValues returns each node's lock value for key: the holder's lease id,
// "" when absent, "?" when the node does not answer.
func (ns nodes) lockValues(tb testing.TB, key string) []string {
	tb.Helper()
	vals := make([]string, len(ns))
	for i, c := range ns {
		v, err := c.Get(context.Background(), redisnode.LockKey(key)).Result()
		switch {
		case err == goredis.Nil:
		case err != nil:
			vals[i] = "?"
		default:
			vals[i] = v
		}
	}
	return vals
}

// holdElsewhere sets key's lock on nodes on to another holder's value for
// a minute.
func (ns nodes) holdElsewhere(tb testing.TB, key string, on ...int) {
	tb.Helper()
	for _, i := range on {
		if err := ns[i].Set(context.Background(), redisnode.LockKey(key), "other", time.Minute).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}

func count(vals []string, want string) int {
	n := 0
	for _, v := range vals {
		if v == want {
			n++
		}
	}
	return n
}

// cluster is n test-owned Redis masters that a test may kill, pause and
// restart without disturbing the shared stack.
type cluster struct {
	srv   []*stack.Redis
	addrs []string
}

func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{srv: make([]*stack.Redis, n), addrs: make([]string, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		dir := t.TempDir()
		wg.Go(func() { c.srv[i], errs[i] = stack.StartRedis(t.Context(), dir) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start redis %d: %v", i, err)
		}
		srv := c.srv[i]
		t.Cleanup(func() { _ = srv.Close() })
		c.addrs[i] = srv.Addr()
	}
	return c
}

// runtimeProcs is GOMAXPROCS: RunParallel starts that many goroutines per
// unit of parallelism.
func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

package redsyncbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/lock/redlock"
)

// Both sides wait the same way while the key is held, so that contention
// measures the algorithms, not the retry policies: a pause drawn from
// [retryDelay/2, 3·retryDelay/2) (redlock's default; redsync's own default is
// 50–250 ms, 32 tries), and a TTL of 10 s.
const (
	retryDelay = redlock.DefaultRetryDelay
	ttl        = redlock.DefaultTTL
)

// client is one side's lock as a caller uses it: acquire, then release.
type client interface {
	cycle(ctx context.Context, key string) error
}

// impl builds clients. Clients of one instance share its connections (and,
// for redlock, its per-key line of waiting goroutines), as the goroutines of
// one service instance do.
type impl struct {
	name        string
	newInstance func(tb testing.TB, addrs []string) client
	// uncontendedOnly: redsync's fail-fast mode returns from Lock with a
	// bare majority, and under contention its Unlock then reports the nodes
	// it never held as errors ("lock already taken", "already expired").
	uncontendedOnly bool
}

var impls = []impl{
	{name: "redsync", newInstance: func(tb testing.TB, addrs []string) client { return newRedsync(tb, addrs, false) }},
	{name: "redsync-failfast", uncontendedOnly: true,
		newInstance: func(tb testing.TB, addrs []string) client { return newRedsync(tb, addrs, true) }},
	{name: "redlock", newInstance: func(tb testing.TB, addrs []string) client { return newRedlock(tb, addrs) }},
	{name: "redlock-unfenced", newInstance: func(tb testing.TB, addrs []string) client {
		return newRedlock(tb, addrs, redlock.WithoutFencing())
	}},
}

type redsyncClient struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

// newRedsync uses go-redis clients with their defaults, as a redsync user
// would. failFast returns from each round once a majority answered (off by
// default in redsync).
func newRedsync(tb testing.TB, addrs []string, failFast bool) *redsyncClient {
	var pools []redsyncredis.Pool
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		tb.Cleanup(func() { _ = c.Close() })
		pools = append(pools, redsyncgoredis.NewPool(c))
	}
	return &redsyncClient{rs: redsync.New(pools...), opts: []redsync.Option{
		redsync.WithExpiry(ttl),
		redsync.WithTries(1 << 30), // until the context ends, as redlock
		redsync.WithRetryDelayFunc(func(int) time.Duration { return retryDelay/2 + rand.N(retryDelay) }),
		redsync.WithFailFast(failFast),
	}}
}

func (c *redsyncClient) cycle(ctx context.Context, key string) error {
	m := c.rs.NewMutex(key, c.opts...)
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	_, err := m.UnlockContext(ctx)
	return err
}

type redlockClient struct{ l *redlock.Locker }

// newRedlock gives each node request the per-node timeout redsync uses by
// default (5% of the TTL) instead of redlock's 50 ms, so that neither side
// fails a cycle on a scheduling hiccup of a loaded machine.
func newRedlock(tb testing.TB, addrs []string, opts ...redlock.Option) *redlockClient {
	opts = append([]redlock.Option{redlock.WithNodeTimeout(ttl / 20)}, opts...)
	l, err := redlock.New(addrs, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return &redlockClient{l: l}
}

func (c *redlockClient) cycle(ctx context.Context, key string) error {
	lease, err := c.l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	return lease.Release(ctx)
}

// keyName is a key no other run uses.
func keyName() string { return fmt.Sprintf("bench-%016x", rand.Uint64()) }

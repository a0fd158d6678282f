package zookeeper

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/internal/lock"
)

// pinnedDialer sends every connection to one server, whatever address the
// client picked: go-zookeeper shuffles its server list, and a client on the
// leader is faster than one on a follower, so the side-by-side benchmarks
// pin ours and zk.Lock to the same node.
func pinnedDialer(server string) zk.Dialer {
	return func(network, _ string, timeout time.Duration) (net.Conn, error) {
		return net.DialTimeout(network, server, timeout)
	}
}

func benchLocker(b *testing.B) *Locker {
	servers := sharedZK(b)
	return mustLocker(b, servers, WithDialer(pinnedDialer(servers[0])))
}

func cycle(b *testing.B, l lock.Locker, key string) {
	lease, err := l.Acquire(context.Background(), key)
	if err != nil {
		b.Fatal(err)
	}
	if err := lease.Release(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkUncontended is one caller taking and releasing one key: three
// round trips (create with the parent, list, delete with the parent).
func BenchmarkUncontended(b *testing.B) {
	l := benchLocker(b)
	k := key(b)
	cycle(b, l, k) // connect first
	for b.Loop() {
		cycle(b, l, k)
	}
}

// BenchmarkZKLockUncontended is go-zookeeper's own recipe on the same
// server, for comparison: create, list, delete, with a parent that stays.
func BenchmarkZKLockUncontended(b *testing.B) {
	servers := sharedZK(b)
	conn, _, err := zk.Connect(servers, 4*time.Second, zk.WithDialer(pinnedDialer(servers[0])),
		zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	path := testRoot + "-zklock/" + key(b)
	acl := zk.WorldACL(zk.PermAll)
	zcycle := func() {
		m := zk.NewLock(conn, path, acl)
		if err := m.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
	zcycle() // connect and create the parents first
	for b.Loop() {
		zcycle()
	}
	b.StopTimer()
	_ = conn.Delete(path, -1)
}

// BenchmarkContended16 is 16 goroutines of one Locker on one key: every
// cycle is a hand-off to the next waiter.
func BenchmarkContended16(b *testing.B) {
	l := benchLocker(b)
	k := key(b)
	cycle(b, l, k)
	b.SetParallelism(16 / min(16, max(1, runtimeProcs())))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			cycle(b, l, k)
		}
	})
}

// BenchmarkSpread16 is 16 goroutines over 1000 keys: mostly uncontended
// cycles, all through one session.
func BenchmarkSpread16(b *testing.B) {
	l := benchLocker(b)
	base := key(b)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%04d", base, i)
	}
	cycle(b, l, keys[0])
	b.SetParallelism(16 / min(16, max(1, runtimeProcs())))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			cycle(b, l, keys[rand.IntN(len(keys))])
		}
	})
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

package zklock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
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

// cycle takes and releases key once.
func cycle(l lock.Locker, key string) error {
	lease, err := l.Acquire(context.Background(), key)
	if err != nil {
		return err
	}
	return lease.Release(context.Background())
}

func mustCycle(b *testing.B, l lock.Locker, key string) {
	if err := cycle(l, key); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkUncontended is one caller taking and releasing one key: three
// round trips (create with the parent, list, delete with the parent).
func BenchmarkUncontended(b *testing.B) {
	l := benchLocker(b)
	k := key(b)
	mustCycle(b, l, k) // connect first
	for b.Loop() {
		mustCycle(b, l, k)
	}
}

// zkLockCycle returns one cycle of go-zookeeper's own recipe (create,
// list, delete, with a parent that stays) on a connection pinned like ours.
func zkLockCycle(b *testing.B) func() {
	servers := sharedZK(b)
	conn, _, err := zk.Connect(servers, 4*time.Second, zk.WithDialer(pinnedDialer(servers[0])),
		zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		b.Fatal(err)
	}
	path := testRoot + "-zklock/" + key(b)
	b.Cleanup(func() {
		_ = conn.Delete(path, -1)
		conn.Close()
	})
	acl := zk.WorldACL(zk.PermAll)
	return func() {
		m := zk.NewLock(conn, path, acl)
		if err := m.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkZKLockUncontended is zk.Lock's uncontended cycle, for comparison
// with BenchmarkUncontended.
func BenchmarkZKLockUncontended(b *testing.B) {
	zcycle := zkLockCycle(b)
	zcycle() // connect and create the parents first
	for b.Loop() {
		zcycle()
	}
}

// BenchmarkPairedVsZKLock alternates one cycle of ours and one of zk.Lock,
// so both see the same load on a shared machine, and reports each one's
// median cycle and the ratio of the medians (the target is at most 1.2).
// Medians, not means: a JVM pause or a neighbour's compile lands on
// whichever cycle runs at the time.
func BenchmarkPairedVsZKLock(b *testing.B) {
	l := benchLocker(b)
	k := key(b)
	zcycle := zkLockCycle(b)
	mustCycle(b, l, k)
	zcycle()
	var ours, theirs []time.Duration
	for b.Loop() {
		t0 := time.Now()
		mustCycle(b, l, k)
		t1 := time.Now()
		zcycle()
		ours, theirs = append(ours, t1.Sub(t0)), append(theirs, time.Since(t1))
	}
	mo, mt := median(ours), median(theirs)
	b.ReportMetric(float64(mo.Nanoseconds()), "ours-p50-ns")
	b.ReportMetric(float64(mt.Nanoseconds()), "zklock-p50-ns")
	b.ReportMetric(float64(mo)/float64(mt), "ratio")
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkContended16 is 16 goroutines of one Locker on one key: every
// cycle is a hand-off to the next waiter.
func BenchmarkContended16(b *testing.B) {
	l := benchLocker(b)
	k := key(b)
	mustCycle(b, l, k)
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0))) // 16 goroutines
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := cycle(l, k); err != nil {
				b.Error(err) // Fatal may not be called off the benchmark goroutine
				return
			}
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
	mustCycle(b, l, keys[0])
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0))) // 16 goroutines
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := cycle(l, keys[rand.IntN(len(keys))]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

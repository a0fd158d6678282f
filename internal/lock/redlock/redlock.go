package redlock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/keyqueue"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// Locker takes leases on a majority of N Redis masters. It is safe for
// concurrent use.
type Locker struct {
	nodes  []*redisnode.Node
	quorum int
	cfg    config
	m      *lockmetrics.Metrics
	loop   *retry.Loop
	rel    *releaser

	// Requests that outlive the call that started them (the slow nodes after
	// an early return) are tracked so Close can wait for them.
	mu     sync.RWMutex
	closed bool
	bg     sync.WaitGroup
	work   chan func()   // unbuffered: a send succeeds only to an idle worker
	quit   chan struct{} // closed by Close: idle workers exit

	// seen is, per key, the lease id that last refused this Locker's
	// attempt on a majority while other nodes granted it (see split).
	seenMu sync.Mutex
	seen   map[string]string
}

var _ lock.Locker = (*Locker)(nil)

// New returns a Locker over the Redis masters at addrs ("host:port" each,
// at least three, no duplicates). An odd number of nodes is best:
// a fourth node adds load without tolerating a second failure. New does not
// connect: call Ping to check the nodes.
func New(addrs []string, opts ...Option) (*Locker, error) {
	if len(addrs) < 3 {
		return nil, fmt.Errorf("redlock: %d node(s) given: a quorum needs at least 3 independent masters", len(addrs))
	}
	seen := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		if a == "" || seen[a] {
			return nil, fmt.Errorf("redlock: node address %q empty or repeated", a)
		}
		seen[a] = true
	}
	cfg := newConfig(opts)
	m, err := lockmetrics.New(cfg.reg, "redlock")
	if err != nil {
		return nil, fmt.Errorf("redlock: metrics: %w", err)
	}
	l := &Locker{
		quorum: len(addrs)/2 + 1, cfg: cfg, m: m,
		loop: &retry.Loop{Name: "redlock", Queue: keyqueue.New(), Metrics: m, Log: cfg.log,
			DefaultTTL: cfg.ttl, RetryDelay: cfg.retryDelay},
		work: make(chan func()), quit: make(chan struct{}),
	}
	l.rel = &releaser{l: l}
	for _, a := range addrs {
		l.nodes = append(l.nodes, redisnode.New(a, cfg.nodeTimeout))
	}
	l.loop.Await = func(ctx context.Context, key string, d time.Duration) error {
		woken, err := l.nodes[l.wakeNode(key)].AwaitWake(ctx, key, d)
		if woken {
			// The next refusal by the same holder may be the release that
			// woke us, still landing: a split again (see split), not a
			// wait for a wake-up already spent.
			l.forgetHolder(key)
		}
		return err
	}
	return l, nil
}

// wakeNode is the node on which key's waiters await its release. One node
// is enough: a wake-up only tells a waiter to try now rather than at the end
// of its pause, and with that node down waiters fall back to their pauses.
// Hashing spreads the waits of many keys over the nodes.
func (l *Locker) wakeNode(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(len(l.nodes)))
}

// Name implements lock.Locker.
func (l *Locker) Name() string { return "redlock" }

// Fenced implements lock.Locker: tokens come from the quorum counter, unless
// the Locker was built WithoutFencing.
func (l *Locker) Fenced() bool { return !l.cfg.noFencing }

// Addrs are the nodes' addresses, in the order given to New.
func (l *Locker) Addrs() []string {
	addrs := make([]string, len(l.nodes))
	for i, n := range l.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Quorum is the number of nodes that must agree: N/2+1.
func (l *Locker) Quorum() int { return l.quorum }

// Ping implements lock.Locker: a majority of nodes must answer PING within
// the node timeout, else the error wraps lock.ErrUnavailable and names the
// nodes that did not answer. The first Ping a node answers also checks
// that it cannot evict lock keys (redisnode.Node.WarnEviction).
func (l *Locker) Ping(ctx context.Context) error {
	results := l.each(allNodes(len(l.nodes)), func(i int) error {
		err := l.nodes[i].Ping(ctx)
		if err == nil {
			l.nodes[i].WarnEviction(ctx, l.cfg.log, "redlock")
		}
		return err
	})
	ok, errs := 0, []error(nil)
	for range l.nodes {
		r := <-results
		if r.err == nil {
			if ok++; ok >= l.quorum {
				return nil
			}
			continue
		}
		errs = append(errs, l.nodeErr(r.node, r.err))
	}
	return fmt.Errorf("redlock: ping: no quorum (%d/%d): %w: %w", ok, len(l.nodes), lock.ErrUnavailable, joinNodeErrs(errs))
}

// Close implements lock.Locker. It waits for requests still running in the
// background (each bounded by the node timeout), stops the deletes that
// nodes have not confirmed yet (redisnode.Release: their keys expire), and
// closes the connections. Leases still held stop being extended and are
// lost; their keys expire.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.bg.Wait()
	close(l.quit)
	var errs []error
	for _, n := range l.nodes {
		if err := n.Close(); err != nil {
			errs = append(errs, fmt.Errorf("redlock: close %s: %w", n.Addr(), err))
		}
	}
	return errors.Join(errs...)
}

func (l *Locker) isClosed() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.closed
}

// spawn runs f on a goroutine of its own, tracked for Close. An idle worker
// goroutine takes f when there is one: a fresh goroutine starts on a small
// stack that go-redis grows (a copy each time) on every request, a cost as
// large as a tenth of a whole lock cycle. After Close, f runs on a new
// goroutine (its requests fail at once on the closed clients) and is not
// waited for.
func (l *Locker) spawn(f func()) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		go f()
		return
	}
	l.bg.Add(1)
	l.mu.RUnlock()
	select {
	case l.work <- f:
	default:
		go l.worker(f)
	}
}

// workerIdle is how long a worker waits for more work before it exits.
const workerIdle = 2 * time.Second

func (l *Locker) worker(f func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		l.bg.Done()
		idle.Reset(workerIdle)
		select {
		case f = <-l.work:
		case <-idle.C:
			return
		case <-l.quit:
			return
		}
	}
}

// result is one node's answer to a fan-out.
type result struct {
	node int
	err  error
}

// each runs f for every node in idx in parallel and returns a channel that
// receives exactly one result per node; it is buffered, so a caller may stop
// reading after a majority and leave the stragglers to finish alone.
func (l *Locker) each(idx []int, f func(i int) error) <-chan result {
	ch := make(chan result, len(idx))
	for _, i := range idx {
		l.spawn(func() { ch <- result{node: i, err: f(i)} })
	}
	return ch
}

// split reports whether a refused attempt at key that some nodes granted
// is a split vote (retry.ErrSplit: a short pause, not a wait for a
// wake-up), given holder, the lease id that refused it on a majority, if
// any. With no such holder the votes split between attempts (two, or
// three each refused by the others' writes): nobody may hold the key, and
// no release will come. With one, the key is held there, by a lease or a
// winning attempt, and its release will wake a waiter — or that release
// is what woke this attempt, which outran its deletes on the nodes that
// refused us (they land within a round trip). The first sighting of a
// holder is taken for the latter; the same holder again, an attempt
// later, for the former. Tagged a split every time, a key held on exactly
// a majority (the other nodes free, or restarted empty) was polled every
// quarter delay as long as it stayed held, ~250 attempts a second; never,
// a waiter woken by a release still landing awaited a wake-up already
// spent, and 16 Lockers on one key stalled for spans (p99 0.1–0.26 s
// against 0.02–0.05). Lease ids are never reused, so a stale entry can
// only name a lease that still refuses us: the map is cleared, not pruned,
// when it grows large.
func (l *Locker) split(key, holder string) bool {
	if holder == "" {
		return true
	}
	l.seenMu.Lock()
	defer l.seenMu.Unlock()
	if l.seen[key] == holder {
		return false
	}
	if l.seen == nil || len(l.seen) >= maxSeen {
		l.seen = make(map[string]string)
	}
	l.seen[key] = holder
	return true
}

// forgetHolder forgets the holder last seen refusing key (split): a
// release woke the waiter.
func (l *Locker) forgetHolder(key string) {
	l.seenMu.Lock()
	delete(l.seen, key)
	l.seenMu.Unlock()
}

// maxSeen bounds Locker.seen between clearings.
const maxSeen = 1024

func allNodes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func (l *Locker) nodeErr(i int, err error) error {
	return &lock.NodeError{Node: l.nodes[i].Addr(), Err: err}
}

// joinNodeErrs joins node errors in node order, so messages are stable.
func joinNodeErrs(errs []error) error {
	slices.SortFunc(errs, func(a, b error) int {
		var na, nb *lock.NodeError
		if errors.As(a, &na) && errors.As(b, &nb) {
			switch {
			case na.Node < nb.Node:
				return -1
			case na.Node > nb.Node:
				return 1
			}
		}
		return 0
	})
	return errors.Join(errs...)
}

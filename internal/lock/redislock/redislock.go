// Package redislock is the single-node Redis lock backend: one Lua script takes
// the lock with SET NX PX and, only if that succeeded, INCRs a per-key
// counter whose value is the fencing token; a Lua compare-and-delete
// releases and a compare-and-pexpire extends, so a holder whose lease expired
// can never touch the next holder's lock.
//
// One server is a single point of failure, and Redis replication is
// asynchronous: a failover to a replica may lose both the lock and the
// latest counter increments, so two leases can hold the same key and even the
// same token. The store's fence check (a lower token, or an equal token from
// another lease id, is rejected) is what keeps the data right then; use the
// redlock backend to survive the loss of a server.
//
// Goroutines of one Locker that want the same key wait in a local FIFO line
// (package keyqueue), and only the head polls Redis: one process is one
// contender per key. Between its attempts the head blocks on the key's wake
// list (BLPOP, for up to retry.AwaitSpan retry delays), to which a release
// pushes one element, and Redis hands it to the client blocked longest: a
// release wakes one waiter, at once, instead of leaving the key free until
// someone's pause ends. That is no line across processes: a pop lasts one
// span (80–240 ms by default), and a waiter whose pop ends unwoken attempts
// again and, refused, blocks anew behind those already blocked, so waiters
// of different Lockers are not served in the order they began to wait.
//
// AcquireBatch takes many keys in one script call (each its own lease id
// and token, as if acquired alone); a key whose line in this Locker is busy
// counts as held and is not sent, so a batch never overtakes a waiter of its
// own process. Leases released together (lock.Set.Release) go back in one
// call, wake-ups included.
package redislock

import (
	"context"
	"errors"
	"fmt"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/keyqueue"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
	"github.com/stockguard/stockguard/internal/lock/redisnode"
	"github.com/stockguard/stockguard/internal/lock/retry"
)

// Locker takes leases on one Redis server. It is safe for concurrent use.
type Locker struct {
	node *redisnode.Node
	cfg  config
	m    *lockmetrics.Metrics
	loop *retry.Loop
	rel  *releaser
}

var _ lock.Locker = (*Locker)(nil)

// New returns a Locker for the Redis server at addr ("host:port"). It does
// not connect: call Ping to check the server.
func New(addr string, opts ...Option) (*Locker, error) {
	if addr == "" {
		return nil, errors.New("redis: no server address")
	}
	cfg := newConfig(opts)
	m, err := lockmetrics.New(cfg.reg, "redis")
	if err != nil {
		return nil, fmt.Errorf("redis: metrics: %w", err)
	}
	n := redisnode.New(addr, cfg.nodeTimeout)
	l := &Locker{node: n, cfg: cfg, m: m, loop: &retry.Loop{Name: "redis",
		Queue: keyqueue.New(), Metrics: m, Log: cfg.log, DefaultTTL: cfg.ttl, RetryDelay: cfg.retryDelay,
		Await: n.AwaitRelease}}
	l.rel = &releaser{l: l}
	return l, nil
}

// Name implements lock.Locker.
func (l *Locker) Name() string { return "redis" }

// Fenced implements lock.Locker: tokens come from the per-key INCR counter.
func (l *Locker) Fenced() bool { return true }

// Addr is the server's address.
func (l *Locker) Addr() string { return l.node.Addr() }

// Ping implements lock.Locker: the server must answer PING within the node
// timeout. The first Ping it answers also checks that it cannot evict lock
// keys (redisnode.Node.WarnEviction).
func (l *Locker) Ping(ctx context.Context) error {
	if err := l.node.Ping(ctx); err != nil {
		return fmt.Errorf("redis: ping: %w: %w", lock.ErrUnavailable, l.nodeErr(err))
	}
	l.node.WarnEviction(ctx, l.cfg.log, "redis")
	return nil
}

// Close implements lock.Locker. It stops the deletes the server has not
// confirmed yet (redisnode.Release). Leases still held stop being extended
// and are lost; their keys expire after the TTL.
func (l *Locker) Close() error { return l.node.Close() }

func (l *Locker) nodeErr(err error) error { return &lock.NodeError{Node: l.node.Addr(), Err: err} }

// Package redisnode is one Redis server as Stockguard's Redis lock backends
// (redis, redlock) use it: a client tuned for locking, the Lua scripts, and
// the key names. Every call is bounded by the node timeout, so one slow or
// paused server can delay a lock operation by at most that much.
package redisnode

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Node is a client for one Redis server. It is safe for concurrent use.
type Node struct {
	addr    string
	timeout time.Duration
	c       *goredis.Client
	// waits carries the blocking pops of AwaitRelease on connections of
	// its own, so that a lock command never queues behind one; slots caps
	// how many block at once.
	waits *goredis.Client
	slots chan struct{}
}

// Bounds of AwaitRelease: the longest one pop blocks, and how many may
// block on one node at a time (a waiter beyond that sleeps instead).
const (
	maxAwait  = time.Second
	maxAwaits = 32
	// wakeTTLms is how long a wake-up nobody took stays in the list.
	wakeTTLms = 1000
)

// New returns a Node for addr whose every call gives up after timeout. It
// does not connect: the first call does.
func New(addr string, timeout time.Duration) *Node {
	c := newClient(addr, timeout, timeout, 0)
	return &Node{addr: addr, timeout: timeout, c: c, waits: newClient(addr, timeout, maxAwait+timeout, maxAwaits),
		slots: make(chan struct{}, maxAwaits)}
}

// newClient is a go-redis client tuned for locking: no retries of its own,
// every wait bounded by timeout (reads by readTimeout); poolSize 0 keeps
// go-redis's default.
func newClient(addr string, timeout, readTimeout time.Duration, poolSize int) *goredis.Client {
	return goredis.NewClient(&goredis.Options{
		Addr: addr,
		// The client must never retry on its own: a retried SET NX whose
		// first reply was lost would find our own key and report "held",
		// and a retried INCR would skip a token. The backends retry whole
		// attempts, after cleaning up, instead.
		MaxRetries:    -1,
		DialerRetries: 1,
		DialTimeout:   timeout,
		ReadTimeout:   readTimeout,
		WriteTimeout:  timeout,
		PoolTimeout:   timeout,
		PoolSize:      poolSize,
		// Per-call deadlines come from the context (the node timeout, or the
		// lease deadline for extensions).
		ContextTimeoutEnabled: true,
		// RESP2, and no CLIENT SETINFO / MAINT_NOTIFICATIONS handshakes: a
		// lock needs no push notifications, RESP3 makes every reply pass
		// through the push-notification check, and each handshake costs a
		// round trip on every new connection, which matters right after a
		// node restarts.
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Addr is the server's address, as given to New.
func (n *Node) Addr() string { return n.addr }

// Client is the underlying go-redis client, for tests and diagnostics.
func (n *Node) Client() *goredis.Client { return n.c }

// Close closes the node's connections.
func (n *Node) Close() error { return errors.Join(n.c.Close(), n.waits.Close()) }

func (n *Node) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, n.timeout)
}

// Ping checks that the server answers.
func (n *Node) Ping(ctx context.Context) error {
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	return n.c.Ping(ctx).Err()
}

// AcquireIncr takes the lock on key for ttl and returns the incremented fence
// counter, or ok=false when someone else holds the lock.
func (n *Node) AcquireIncr(ctx context.Context, key, id string, ttl time.Duration) (token uint64, ok bool, err error) {
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	v, err := acquireIncrScript.Run(ctx, n.c, keys(key), id, ttl.Milliseconds()).Int64()
	if err != nil {
		return 0, false, err
	}
	if v <= 0 {
		return 0, false, nil
	}
	return uint64(v), true, nil
}

// AcquireRead takes the lock on key for ttl and reads the fence counter in
// the same atomic step; the counter is returned whether or not the lock was
// taken.
func (n *Node) AcquireRead(ctx context.Context, key, id string, ttl time.Duration) (acquired bool, fence uint64, err error) {
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	v, err := acquireReadScript.Run(ctx, n.c, keys(key), id, ttl.Milliseconds()).Slice()
	if err != nil {
		return false, 0, err
	}
	if len(v) != 2 {
		return false, 0, fmt.Errorf("acquire script: unexpected reply %v", v)
	}
	flag, ok1 := v[0].(int64)
	s, ok2 := v[1].(string)
	if !ok1 || !ok2 {
		return false, 0, fmt.Errorf("acquire script: unexpected reply %v", v)
	}
	fence, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return false, 0, fmt.Errorf("fence counter %s: %w", FenceKey(key), err)
	}
	return flag == 1, fence, nil
}

// SetNX takes the lock on key for ttl without touching the fence counter
// (Redlock without fencing, for comparison with libraries that have none).
func (n *Node) SetNX(ctx context.Context, key, id string, ttl time.Duration) (bool, error) {
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	return n.c.SetNX(ctx, LockKey(key), id, ttl).Result()
}

// ErrFenceAhead means a node's fence counter was not below the token being
// published: another acquisition got there with this token or a larger one.
var ErrFenceAhead = errors.New("fence counter not below the token")

// ErrNotHeld means the lock on the node does not hold our lease id (it
// expired, was deleted, or belongs to another lease).
var ErrNotHeld = errors.New("lock not held by this lease")

// Fence raises key's fence counter to token while the node still holds our
// lock. It returns nil when it did, ErrNotHeld or ErrFenceAhead when it did
// not, or the connection error.
func (n *Node) Fence(ctx context.Context, key, id string, token uint64) error {
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	v, err := fenceScript.Run(ctx, n.c, keys(key), id, strconv.FormatUint(token, 10)).Int64()
	switch {
	case err != nil:
		return err
	case v == 1:
		return nil
	case v == 0:
		return ErrNotHeld
	default:
		return ErrFenceAhead
	}
}

// Release deletes the lock on key if it holds id; deleted reports whether
// it did. With wake, a delete also wakes one waiter blocked in AwaitRelease
// on this node.
//
// A release that times out is sent again, up to releaseTries times: one that
// never lands leaves the key held for the rest of its TTL, and every order
// for that key waits that long, while a compare-and-delete is safe to repeat
// (after a delete whose reply was lost, the repeat finds nothing of ours).
// The node timeout is short, so a server busy for a moment (two saturated
// cores) is the usual cause.
func (n *Node) Release(ctx context.Context, key, id string, wake bool) (deleted bool, err error) {
	for try := 1; ; try++ {
		rctx, cancel := n.ctx(ctx)
		var v int64
		if wake {
			v, err = releaseWakeScript.Run(rctx, n.c, []string{LockKey(key), WakeKey(key)}, id, wakeTTLms).Int64()
		} else {
			v, err = releaseScript.Run(rctx, n.c, []string{LockKey(key)}, id).Int64()
		}
		cancel()
		if err == nil || try == releaseTries || !retryable(ctx, err) {
			return v == 1, err
		}
		select {
		case <-ctx.Done():
			return false, err
		case <-time.After(releasePause):
		}
	}
}

// ErrAwaitBusy means every AwaitRelease slot of the node is taken.
var ErrAwaitBusy = errors.New("too many waiters blocked on this node")

// AwaitRelease blocks until a release of key on this node (with wake) wakes
// this caller, for at most d (capped at maxAwait): it returns nil either
// way, since only the next attempt tells whether the key is free. Redis
// hands each wake-up to the client blocked longest, so a release wakes one
// waiter, oldest first, not a herd. An error (the node unreachable, or
// ErrAwaitBusy) means nothing was awaited, possibly for part of d.
func (n *Node) AwaitRelease(ctx context.Context, key string, d time.Duration) error {
	select {
	case n.slots <- struct{}{}:
		defer func() { <-n.slots }()
	default:
		return ErrAwaitBusy
	}
	// At least BLPOP's resolution: its 0 would block for good.
	d = min(max(d, time.Millisecond), maxAwait)
	ctx, cancel := context.WithTimeout(ctx, d+n.timeout)
	defer cancel()
	// Do, not BLPop: go-redis rounds a BLPop timeout below one second up to
	// a whole second, and Redis takes a decimal one.
	err := n.waits.Do(ctx, "BLPOP", WakeKey(key), strconv.FormatFloat(d.Seconds(), 'f', 3, 64)).Err()
	if errors.Is(err, goredis.Nil) {
		return nil // d passed without a release
	}
	return err
}

// releaseTries and releasePause bound the repeats of a release that timed
// out: a few node timeouts, far inside any lease's TTL.
const (
	releaseTries = 3
	releasePause = 10 * time.Millisecond
)

// retryable reports whether a failed call may succeed if sent again: a
// timeout or a connection error, not a closed client or a cancelled caller.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, goredis.ErrClosed) {
		return false
	}
	var rerr goredis.Error
	return !errors.As(err, &rerr) // a reply from Redis (an error reply) is final
}

// Extend resets the lock's TTL to ttl if it holds id; it returns ErrNotHeld
// when it does not.
func (n *Node) Extend(ctx context.Context, key, id string, ttl time.Duration) error {
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	v, err := extendScript.Run(ctx, n.c, []string{LockKey(key)}, id, ttl.Milliseconds()).Int64()
	if err != nil {
		return err
	}
	if v != 1 {
		return ErrNotHeld
	}
	return nil
}

// Package redisnode is one Redis server as Stockguard's Redis lock backends
// (redis, redlock) use it: a client tuned for locking, the Lua scripts, and
// the key names. Every call is bounded by the node timeout, so one slow or
// paused server can delay a lock operation by at most that much; a delete
// the server does not confirm in a Release's tries goes on in the
// background instead (see Release).
package redisnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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
	// bg goes on with the deletes a Release could not confirm (see settle).
	bg settling
	// evictionChecked: WarnEviction has run, or is running.
	evictionChecked atomic.Bool
}

// Bounds of AwaitRelease: the longest one pop blocks, and how many may
// block on one node at a time (a waiter beyond that sleeps instead).
const (
	maxAwait  = time.Second
	maxAwaits = 32
	// cronSlack is how much later than its timeout an idle Redis may end a
	// blocked BLPOP: it times blocked clients out in its cron (hz 10), up
	// to ~100 ms late. The client's read deadline leaves it that margin:
	// were ours first, the wait would end in an error (the caller falling
	// back to a slept pause), go-redis would close the connection (a new
	// dial per unwoken wait), and a wake-up Redis popped for the closed
	// connection meanwhile would be lost.
	cronSlack = 110 * time.Millisecond
	// wakeTTLms is how long a wake-up nobody took stays in the list.
	wakeTTLms = 1000
)

// New returns a Node for addr whose every call gives up after timeout. It
// does not connect: the first call does.
func New(addr string, timeout time.Duration) *Node {
	c := newClient(addr, timeout, timeout, 0)
	n := &Node{addr: addr, timeout: timeout, c: c, waits: newClient(addr, timeout, maxAwait+timeout+cronSlack, maxAwaits),
		slots: make(chan struct{}, maxAwaits)}
	n.bg.ctx, n.bg.stop = context.WithCancel(context.Background())
	return n
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

// Close stops the deletes still going on in the background (Release), waits
// for the one in flight (bounded by the node timeout), and closes the
// node's connections.
func (n *Node) Close() error {
	n.bg.close()
	return errors.Join(n.c.Close(), n.waits.Close())
}

func (n *Node) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, n.timeout)
}

// Ping checks that the server answers.
func (n *Node) Ping(ctx context.Context) error {
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	return n.c.Ping(ctx).Err()
}

// WarnEviction logs a warning, once per Node, if the server may evict keys:
// with maxmemory set and a maxmemory-policy other than noeviction, memory
// pressure can delete a held lock (every lock key has a TTL, so even the
// volatile-* policies pick them) and, under allkeys-*, its fence counter,
// tokens starting again at 1: another lease is then granted the key while
// ours is valid, and only the store's fence check keeps the data right. A
// warning, not a failure: managed Redis services often refuse CONFIG,
// which is logged at debug level. A call that gets no reply leaves the
// check to the next.
func (n *Node) WarnEviction(ctx context.Context, log *slog.Logger, backend string) {
	if !n.evictionChecked.CompareAndSwap(false, true) {
		return
	}
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	conf, err := n.c.ConfigGet(ctx, "maxmemory*").Result()
	var rerr goredis.Error
	switch {
	case errors.As(err, &rerr):
		log.Debug(backend+": cannot check the server's maxmemory-policy", "node", n.addr, "err", err)
		return
	case err != nil:
		n.evictionChecked.Store(false)
		return
	}
	if policy, limit := conf["maxmemory-policy"], conf["maxmemory"]; limit != "" && limit != "0" && policy != "noeviction" {
		log.Warn(backend+": the server may evict lock keys: a held lock can vanish and two leases hold one key; set maxmemory-policy noeviction, or no maxmemory",
			"node", n.addr, "maxmemory-policy", policy, "maxmemory", limit)
	}
}

// Hold is one key under one lease id, the unit of every batch call: each
// key of a batch keeps its own lease id, as if acquired alone.
type Hold struct {
	Key string
	ID  string // the lease id, stored as the lock's value
}

// Grant is one key's answer to AcquireBump.
type Grant struct {
	Acquired bool // the node granted us the lock
	// Bumped: the node incremented the counter under our grant, so Fence
	// is a value no other acquisition saw on this node.
	Bumped bool
	Fence  uint64 // the node's fence counter after the call, acquired or not
	// Holder is, where the node refused us, the lease id that holds the
	// key there ("" if unknown): one value held on a majority is a lease
	// (or a winning attempt), whose release will come; several are a split.
	Holder string
}

// lockFenceKeys returns the lock and fence key of every hold, in the order
// the scripts expect them, and argv: the TTL in ms, then each lease id.
func lockFenceKeys(holds []Hold, ttl time.Duration) (keys []string, argv []any) {
	keys = make([]string, 0, 2*len(holds))
	argv = make([]any, 0, 1+len(holds))
	argv = append(argv, ttl.Milliseconds())
	for _, h := range holds {
		keys = append(keys, LockKey(h.Key), FenceKey(h.Key))
		argv = append(argv, h.ID)
	}
	return keys, argv
}

// AcquireIncr takes the lock on every hold's key for ttl, in one script
// call, and returns per hold the incremented fence counter (the token), or
// 0 where someone else holds the lock; there it leaves the key's wait flag,
// so that the holder's release wakes a waiter (Release, WakeIfOurs). await
// is the longest the caller blocks in AwaitRelease after a refusal: the
// flag lasts that (capped as AwaitRelease caps it) plus the node timeout,
// the longest a refused caller takes to start blocking. A flag that
// outlives its waiter only costs a wake-up nobody takes.
func (n *Node) AcquireIncr(ctx context.Context, holds []Hold, ttl, await time.Duration) ([]uint64, error) {
	if len(holds) == 0 {
		return nil, nil
	}
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	keys := make([]string, 0, 3*len(holds))
	argv := make([]any, 0, 2+len(holds))
	argv = append(argv, ttl.Milliseconds(), (min(await, maxAwait) + n.timeout).Milliseconds())
	for _, h := range holds {
		keys = append(keys, LockKey(h.Key), FenceKey(h.Key), WaitKey(h.Key))
		argv = append(argv, h.ID)
	}
	v, err := acquireIncrScript.Run(ctx, n.c, keys, argv...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != len(holds) {
		return nil, fmt.Errorf("acquire script: %d replies for %d keys", len(v), len(holds))
	}
	tokens := make([]uint64, len(v))
	for i, t := range v {
		tokens[i] = uint64(max(t, 0))
	}
	return tokens, nil
}

// Call is the Redis keys and arguments of one batch script call, built once
// and sent to every node: a Redlock round asks all N nodes the same thing,
// and building the arguments per node cost as many allocations as the rest
// of the round. A Call is read-only once built and safe to share.
type Call struct {
	holds int
	keys  []string
	argv  []any
}

// AcquireCall is AcquireBump's call for holds and ttl.
func AcquireCall(holds []Hold, ttl time.Duration) Call {
	keys, argv := lockFenceKeys(holds, ttl)
	return Call{holds: len(holds), keys: keys, argv: argv}
}

// AcquireBump takes the lock on every hold's key of c (see AcquireCall)
// and, where it did, increments the key's fence counter in the same atomic
// step, in one script call; each counter is returned whether or not its lock
// was taken.
func (n *Node) AcquireBump(ctx context.Context, c Call) ([]Grant, error) {
	if c.holds == 0 {
		return nil, nil
	}
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	v, err := acquireBumpScript.Run(ctx, n.c, c.keys, c.argv...).Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != 2*c.holds {
		return nil, fmt.Errorf("acquire script: %d replies for %d keys", len(v), c.holds)
	}
	grants := make([]Grant, c.holds)
	for i := range grants {
		var flag int64
		switch f := v[2*i].(type) {
		case int64:
			flag = f
		case string: // held: by this lease id
			grants[i].Holder = f
		default:
			flag = -1
		}
		if flag < 0 || flag > 2 {
			return nil, fmt.Errorf("acquire script: unexpected reply %v", v[2*i:2*i+2])
		}
		var fence uint64
		switch f := v[2*i+1].(type) {
		case int64:
			if f < 0 {
				return nil, fmt.Errorf("fence counter %s: %d", c.keys[2*i+1], f)
			}
			fence = uint64(f)
		case string:
			if fence, err = strconv.ParseUint(f, 10, 64); err != nil {
				return nil, fmt.Errorf("fence counter %s: %w", c.keys[2*i+1], err)
			}
		default:
			return nil, fmt.Errorf("acquire script: unexpected reply %v", v[2*i:2*i+2])
		}
		grants[i].Acquired, grants[i].Bumped, grants[i].Fence = flag > 0, flag == 2, fence
	}
	return grants, nil
}

// SetNX takes the lock on every hold's key for ttl without touching the
// fence counters (Redlock without fencing, for comparison with libraries
// that have none), in one script call; it reports per hold whether it did
// (Acquired) or who holds the key (Holder); Fence is 0.
func (n *Node) SetNX(ctx context.Context, holds []Hold, ttl time.Duration) ([]Grant, error) {
	if len(holds) == 0 {
		return nil, nil
	}
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	keys := make([]string, len(holds))
	argv := make([]any, 0, 1+len(holds))
	argv = append(argv, ttl.Milliseconds())
	for i, h := range holds {
		keys[i] = LockKey(h.Key)
		argv = append(argv, h.ID)
	}
	v, err := setNXScript.Run(ctx, n.c, keys, argv...).Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != len(holds) {
		return nil, fmt.Errorf("setnx script: %d replies for %d keys", len(v), len(holds))
	}
	grants := make([]Grant, len(v))
	for i, f := range v {
		switch f := f.(type) {
		case int64:
			grants[i].Acquired = f == 1
		case string:
			grants[i].Holder = f
		default:
			return nil, fmt.Errorf("setnx script: unexpected reply %v", f)
		}
	}
	return grants, nil
}

// ErrFenceAhead means a node's fence counter was not below the token being
// published: another acquisition got there with this token or a larger one.
var ErrFenceAhead = errors.New("fence counter not below the token")

// ErrNotHeld means the lock on the node does not hold our lease id (it
// expired, was deleted, or belongs to another lease).
var ErrNotHeld = errors.New("lock not held by this lease")

// FenceCall is Fence's call: raise every hold's fence counter to its token
// (tokens aligned with holds).
func FenceCall(holds []Hold, tokens []uint64) (Call, error) {
	if len(holds) != len(tokens) {
		return Call{}, fmt.Errorf("fence: %d tokens for %d keys", len(tokens), len(holds))
	}
	keys := make([]string, 0, 2*len(holds))
	argv := make([]any, 0, 2*len(holds))
	for i, h := range holds {
		keys = append(keys, LockKey(h.Key), FenceKey(h.Key))
		argv = append(argv, h.ID, strconv.FormatUint(tokens[i], 10))
	}
	return Call{holds: len(holds), keys: keys, argv: argv}, nil
}

// Fence raises every hold's fence counter of c (see FenceCall) to its token
// where the counter is below it, whether or not the node holds our lock
// there, in one script call. Per hold it returns nil when the raise counts
// (the node holds our lock and the counter was below the token),
// ErrNotHeld or ErrFenceAhead when it does not; err is the call's failure.
func (n *Node) Fence(ctx context.Context, c Call) (results []error, err error) {
	if c.holds == 0 {
		return nil, nil
	}
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	v, err := fenceScript.Run(ctx, n.c, c.keys, c.argv...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != c.holds {
		return nil, fmt.Errorf("fence script: %d replies for %d keys", len(v), c.holds)
	}
	results = make([]error, len(v))
	for i, r := range v {
		switch {
		case r == 0:
			results[i] = ErrNotHeld
		case r < 0:
			results[i] = ErrFenceAhead
		}
	}
	return results, nil
}

// Wake is what a release does for the waiters blocked on a key in
// AwaitRelease on this node.
type Wake uint8

const (
	// WakeNone wakes nobody: the clean-up of a key another lease holds,
	// whose waiters would only be sent into the same refusal.
	WakeNone Wake = iota
	// WakeIfOurs wakes one waiter if the lock was ours here and a refusal
	// left the key's wait flag (AcquireIncr): a single server's lock, which
	// this delete frees, and which nobody can be waiting for unless some
	// acquisition of it was refused.
	WakeIfOurs
	// WakeAnyway wakes one waiter whether or not the lock was ours here: a
	// quorum's lock is freed by its deletes on the other servers too, and
	// a lease that held it without this server (it refused our write)
	// would otherwise leave its waiters asleep while the key stands free.
	WakeAnyway
)

// Written is what a release knows of its lock write of one hold on this
// node. It decides when the delete of that hold counts as confirmed.
type Written uint8

const (
	// Landed: the node answered the write (it granted the lock), or the
	// hold is a lease's. One answered delete confirms it.
	Landed Written = iota
	// Unknown: the write got no answer (a timeout, a broken connection),
	// so it may still be queued on the server: a SIGSTOPped Redis runs
	// what its connections buffered once it resumes, SET NX included. See
	// Release for what confirms its delete.
	Unknown
	// Absent: nothing of ours can be there (the node refused the write, or
	// it was never sent): the delete is sent for its wake-up only, and
	// needs no confirmation.
	Absent
)

// ErrPending means a Release could not confirm every delete in its tries
// (or before its ctx ended): the deletes not confirmed go on in the
// background until they are, for at most settleTTLs TTLs, or until Close.
var ErrPending = errors.New("delete not confirmed: it goes on in the background")

// Release deletes the lock on every hold's key that still holds its lease
// id, in one script call, and returns how many it deleted and, per hold,
// whether it woke a waiter; each key wakes as wake[i] says (wake may be nil
// or short: WakeNone). written[i] says what is known of hold i's lock write
// here (nil or short: Landed); ttl is the holds' longest TTL.
//
// Each delete must be confirmed, or the key may stay held here for its
// whole TTL (and every order for it wait that long):
//
//   - Landed: by one answered delete.
//   - Unknown: by an answered delete that found and deleted it, or else by
//     an answered delete sent after the node answered an earlier one. The
//     write was sent on a connection the server had already answered on
//     (go-redis sends HELLO on every new connection and waits for its
//     reply), so it is in the server's event loop. A resumed Redis handles,
//     in its first iteration, every such connection with data waiting;
//     it reads a new connection in a later iteration; and it writes the
//     replies of an iteration only after all of that iteration's commands
//     ran. So the server's first answer to a request sent after our write
//     comes after the write ran (or it is lost for good), yet that
//     request's own delete may have run just before the write in the same
//     iteration; a delete sent after that answer runs after it. That
//     assumes the write reached the server's socket before the later
//     request did: so on one host; across a network a segment of it lost
//     and sent again could come later still, which only the background's
//     bound (settleTTLs) covers. (Checked on a paused
//     redis-server 7.0, TestPausedServerRunsBufferedWriteFirst: a command
//     on a connection opened during the pause ran after the buffered SET
//     every time; a delete on another connection answered before the
//     pause ran before it in 3 to 10 trials of 20; the delete sent after
//     its answer always found it.)
//   - Absent: by nothing; a failure is no loss.
//
// A delete that is not confirmed is sent again, up to releaseTries failed
// tries, releasePause apart: a compare-and-delete is safe to repeat (after
// a delete whose reply was lost, the repeat finds nothing of ours), and a
// server busy for a moment (two saturated cores) is the usual cause. What
// is still unconfirmed after them, or once ctx is done, goes on in the
// background and err wraps ErrPending. An error reply that turned the
// delete away unrun (notRun: a server busy with another client's script,
// or loading its dataset after a restart) is such a failed try, and no
// answer; any other error (a closed Node, another error reply) ends it.
// Release returns by the time ctx is done: pass context.WithoutCancel(ctx)
// to have it make its tries whatever ctx does.
// A release whose every delete is confirmed at once (the node answered
// the first call, and no write was Unknown) costs one call, as ever.
func (n *Node) Release(ctx context.Context, holds []Hold, wake []Wake, written []Written, ttl time.Duration) (deleted int, woke []bool, err error) {
	if len(holds) == 0 {
		return 0, nil, nil
	}
	// Every repeat of this release, here or in the background, runs before
	// its wake markers expire.
	marked := releaseTries*(n.timeout+releasePause) + settleTTLs*max(ttl, time.Second)
	keys, argv := releaseArgs(holds, wake, marked)
	var need []uint8 // answers each hold still needs; nil: one answer for all
	for i := range holds {
		if writtenAt(written, i) != Landed {
			need = make([]uint8, len(holds))
			for j := range need {
				need[j] = needOf(writtenAt(written, j))
			}
			break
		}
	}
	woke = make([]bool, len(holds))
	for failures := 0; ; {
		if err = ctx.Err(); err == nil {
			rctx, cancel := n.ctx(ctx)
			var v []int64
			v, err = releaseScript.Run(rctx, n.c, keys, argv...).Int64Slice()
			cancel()
			if err == nil {
				if len(v) != 1+len(holds) {
					return deleted, woke, fmt.Errorf("release script: %d replies for %d keys", len(v), len(holds))
				}
				deleted += int(v[0])
				for i := range woke {
					woke[i] = woke[i] || v[i+1]&1 == 1
				}
				if need == nil || !answered(need, v[1:]) {
					return deleted, woke, nil
				}
				// An Unknown write answered once: one more delete, sent after
				// that answer, waking nobody: this call woke whom it should,
				// and a second wake-up would send a waiter into the lock.
				if wake != nil {
					wake = nil
					keys, argv = releaseArgs(holds, nil, marked)
				}
				continue
			}
			if !retryable(err) {
				return deleted, woke, err
			}
			failures++
		}
		if failures >= releaseTries || ctx.Err() != nil {
			if need != nil && !slices.ContainsFunc(need, func(m uint8) bool { return m > 0 }) {
				return deleted, woke, err // only Absent holds: nothing of ours to confirm
			}
			n.bg.add(n, holds, wake, need, ttl)
			return deleted, woke, fmt.Errorf("%w: %w", ErrPending, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(releasePause):
		}
	}
}

// releaseArgs builds the release script's keys and arguments for holds,
// each key waking as wake says, its wake marker (WokeKey) kept for woke.
func releaseArgs(holds []Hold, wake []Wake, woke time.Duration) (keys []string, argv []any) {
	keys = make([]string, 0, 4*len(holds))
	argv = make([]any, 0, 2+2*len(holds))
	argv = append(argv, wakeTTLms, woke.Milliseconds())
	for i, h := range holds {
		keys = append(keys, LockKey(h.Key), WakeKey(h.Key), WaitKey(h.Key), WokeKey(h.Key, h.ID))
		argv = append(argv, h.ID, strconv.Itoa(int(wakeAt(wake, i))))
	}
	return keys, argv
}

func wakeAt(wake []Wake, i int) Wake {
	if i < len(wake) {
		return wake[i]
	}
	return WakeNone
}

func writtenAt(written []Written, i int) Written {
	if i < len(written) {
		return written[i]
	}
	return Landed
}

// needOf is how many answered deletes confirm a hold written so (see
// Release).
func needOf(w Written) uint8 {
	switch w {
	case Unknown:
		return 2
	case Absent:
		return 0
	}
	return 1
}

// answered counts one answer towards each hold's need (flags: the release
// script's per-key replies, bit 2 set where it deleted our lock, which
// confirms that hold at once) and reports whether any hold needs more.
func answered(need []uint8, flags []int64) (more bool) {
	for i := range need {
		switch {
		case need[i] == 0:
		case flags[i]&2 != 0:
			need[i] = 0
		default:
			need[i]--
		}
		more = more || need[i] > 0
	}
	return more
}

// ErrAwaitBusy means every AwaitRelease slot of the node is taken.
var ErrAwaitBusy = errors.New("too many waiters blocked on this node")

// AwaitRelease blocks until a release of key on this node (with wake) wakes
// this caller, for at most d (capped at maxAwait): it returns nil either
// way, since only the next attempt tells whether the key is free. Redis
// hands each wake-up to the client whose pop has blocked longest, so a
// release wakes one waiter, not a herd; but a pop ends after d and its
// caller blocks again behind those already blocked, so the order is not
// the order in which the callers began to wait. An error (the node
// unreachable, or ErrAwaitBusy) means nothing was awaited, possibly for
// part of d.
//
// A cancelled ctx returns at once with its error. go-redis notices a
// context's deadline during a blocking read, not its cancellation, so the
// pop stays blocked on its connection (and slot) until it ends by itself;
// a wake-up it takes after the caller left is pushed back for the next
// waiter. Taken and dropped, it would leave every other waiter of the key
// asleep for its whole wait while the key stands free.
func (n *Node) AwaitRelease(ctx context.Context, key string, d time.Duration) error {
	_, err := n.AwaitWake(ctx, key, d)
	return err
}

// AwaitWake is AwaitRelease, telling too whether a release woke the
// caller (woken) or d passed.
func (n *Node) AwaitWake(ctx context.Context, key string, d time.Duration) (woken bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	select {
	case n.slots <- struct{}{}:
	default:
		return false, ErrAwaitBusy
	}
	// At least BLPOP's resolution: its 0 would block for good.
	d = min(max(d, time.Millisecond), maxAwait)
	var taken atomic.Bool // by the caller leaving, or by the pop's outcome
	popped := make(chan error, 1)
	start := time.Now()
	go func() {
		defer func() { <-n.slots }()
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d+n.timeout+cronSlack)
		defer cancel()
		// Do, not BLPop: go-redis rounds a BLPop timeout below one second
		// up to a whole second, and Redis takes a decimal one.
		err := n.waits.Do(pctx, "BLPOP", WakeKey(key), strconv.FormatFloat(d.Seconds(), 'f', 3, 64)).Err()
		if !taken.CompareAndSwap(false, true) {
			if err == nil {
				_ = n.passOn(pctx, key)
			}
			return
		}
		popped <- err
	}()
	select {
	case err = <-popped:
	case <-ctx.Done():
		if taken.CompareAndSwap(false, true) {
			return false, ctx.Err()
		}
		err = <-popped // the pop ended first
	}
	if err == nil && ctx.Err() != nil {
		// Woken as the caller gave up: the wake-up is the next waiter's.
		_ = n.passOn(context.WithoutCancel(ctx), key)
		return false, ctx.Err()
	}
	if errors.Is(err, goredis.Nil) {
		return false, nil // d passed without a release
	}
	if err != nil && timedOut(err) && time.Since(start) >= d {
		// d passed without a release; Redis, later still than cronSlack
		// (a loaded host), did not say so first.
		return false, nil
	}
	return err == nil, err
}

// timedOut reports whether err is a read that ran out of time.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// passOn gives back a wake-up nobody will use, as the release script
// leaves one: a single element, expiring.
func (n *Node) passOn(ctx context.Context, key string) error {
	ctx, cancel := n.ctx(ctx)
	defer cancel()
	wake := WakeKey(key)
	_, err := n.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.LPush(ctx, wake, "1")
		p.LTrim(ctx, wake, 0, 0)
		p.PExpire(ctx, wake, wakeTTLms*time.Millisecond)
		return nil
	})
	return err
}

// releaseTries and releasePause bound the repeats of a release that timed
// out before it goes on in the background: a few node timeouts, far inside
// any lease's TTL.
const (
	releaseTries = 3
	releasePause = 10 * time.Millisecond
)

// retryable reports whether a failed call may succeed if sent again: a
// timeout, a connection error, or an error reply that turned the call away
// unrun (notRun); not a closed client or any other error reply, which a
// repeat would only meet again.
func retryable(err error) bool {
	if errors.Is(err, goredis.ErrClosed) {
		return false
	}
	var rerr goredis.Error
	return !errors.As(err, &rerr) || notRun(err)
}

// notRun reports whether err is an error reply by which the server refused
// to run the call in a state that passes: BUSY (another client's script is
// past busy-reply-threshold), LOADING (a restart reading its dataset from
// disk, as a persistent Redis does), TRYAGAIN, MASTERDOWN, CLUSTERDOWN.
// Nothing of the call ran, and a later send may run it.
func notRun(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	code, _, _ := strings.Cut(rerr.Error(), " ")
	switch code {
	case "BUSY", "LOADING", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN":
		return true
	}
	return false
}

// Unsent reports whether a failed call surely never ran on the server: no
// connection could be made (a refused or timed-out dial), the pool had
// none to give, the Node is closed, or the server turned it away unrun
// (notRun). Its writes are then known absent. Any other failure (a timeout
// on an open connection) leaves them Unknown.
func Unsent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrClosed) || notRun(err)
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

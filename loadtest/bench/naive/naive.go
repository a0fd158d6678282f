// Package naive is the bench's naive lock loops: what a developer writes
// with an off-the-shelf lock library and no batching, one process, no
// HTTP: goroutines each taking a key's lock (go-redsync over the Redis
// masters, or go-zookeeper's zk.Lock), reading the row's available
// stock, updating it, and unlocking. The service, with HTTP, three
// processes and fencing, is compared with it on the same keys.
package naive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/loadtest/tally"
)

// Locker is one lock library as the loop uses it.
type Locker interface {
	// Lock takes key's lock and returns its release.
	Lock(ctx context.Context, key string) (unlock func() error, err error)
	// Name is the library, for the result.
	Name() string
}

// Config is one loop.
type Config struct {
	Goroutines int
	Keys       int // 1: the hot key
	Warmup     time.Duration
	Window     time.Duration
	Seed       uint64
}

// Result is the measured window of one loop.
type Result struct {
	Library    string  `json:"library"`
	Keys       int     `json:"keys"`
	Goroutines int     `json:"goroutines"`
	DurationS  float64 `json:"duration_s"`
	Orders     int64   `json:"orders"`
	OrdersPerS float64 `json:"orders_per_s"`
	// TurnsPerS is each measured turn's orders per second, when the loop
	// took turns with the service (Loop).
	TurnsPerS []float64 `json:"turns_per_s,omitempty"`
	// LockFailures counts acquisitions the library gave up on (redsync
	// after its default 32 tries); the loop goes on with the next order.
	LockFailures int64 `json:"lock_failures"`
	// UnlockFailures counts releases that failed after their order's
	// UPDATE committed (redsync when a majority of masters did not confirm
	// in time): the order counts, and the lock expires on its own.
	UnlockFailures int64 `json:"unlock_failures"`
	// Total counts every order the loop placed, warm-up and tail included;
	// Stored the reservations the table gained over the run. Run checks
	// Total ≤ Stored ≤ Total + Goroutines: an order cut short at the end
	// may have written before it was cancelled, and nothing else may.
	Total  int64 `json:"orders_total"`
	Stored int64 `json:"stored"`
}

// ErrUnaccounted is returned when the table's reservations do not match
// the orders the loop counted: a lock that let two holders in, whose
// rate would mean nothing.
var ErrUnaccounted = errors.New("naive: the table's reservations do not match the orders counted")

// Table is the loop's rows: a scratch table shaped like skus, so that a
// row costs what a SKU row costs, with Keys rows of ample stock.
type Table struct {
	pool *pgxpool.Pool
	name string
	keys []string
}

// OpenTable creates the table in the database (the service's migrations
// must have run there) with keys rows, and a pool of conns connections.
func OpenTable(ctx context.Context, databaseURL string, keys, conns int) (*Table, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("naive: %w", err)
	}
	cfg.MaxConns, cfg.MinConns = int32(conns), int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("naive: %w", err)
	}
	t := &Table{pool: pool, name: "stockguard_bench_naive_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+t.name+" (LIKE skus INCLUDING ALL)"); err != nil {
		pool.Close()
		return nil, fmt.Errorf("naive: scratch table: %w", err)
	}
	for i := range keys {
		t.keys = append(t.keys, fmt.Sprintf("n%05d", i))
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+t.name+" (sku, available, received) SELECT k, $2, $2 FROM unnest($1::text[]) k",
		t.keys, int64(1)<<50); err != nil {
		t.Close()
		return nil, fmt.Errorf("naive: rows: %w", err)
	}
	return t, nil
}

// Name is the table's name.
func (t *Table) Name() string { return t.name }

// Close drops the table (with a fresh context: the run's may be over)
// and closes the pool.
func (t *Table) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = t.pool.Exec(ctx, "DROP TABLE IF EXISTS "+t.name)
	t.pool.Close()
}

// ErrSoldOut is returned when a row has no stock left, which the table's
// stock rules out; it would make the loop's rate meaningless.
var ErrSoldOut = errors.New("naive: row sold out")

// order is one iteration: lock, SELECT, UPDATE, unlock, the row's key
// prefixed with the run's so that no two loops share a lock. The unlock's
// error comes apart: once the UPDATE committed, the order is placed
// whatever the release says.
func (t *Table) order(ctx context.Context, lk Locker, prefix, sku string) (unlockErr, err error) {
	unlock, err := lk.Lock(ctx, prefix+sku)
	if err != nil {
		return nil, err
	}
	var available int64
	err = t.pool.QueryRow(ctx, "SELECT available FROM "+t.name+" WHERE sku = $1", sku).Scan(&available)
	if err == nil && available < 1 {
		err = ErrSoldOut
	}
	if err == nil {
		_, err = t.pool.Exec(ctx, "UPDATE "+t.name+" SET available = available - 1, reserved = reserved + 1, updated_at = now() WHERE sku = $1", sku)
	}
	return unlock(), err
}

// Run runs the loop on the first cfg.Keys rows: a warm-up, then the
// measured window. Each goroutine picks its keys at random (seeded).
func (t *Table) Run(ctx context.Context, lk Locker, cfg Config) (Result, error) {
	if cfg.Window <= 0 || cfg.Warmup < 0 {
		return Result{Library: lk.Name(), Keys: cfg.Keys, Goroutines: cfg.Goroutines},
			fmt.Errorf("naive: window %v, warm-up %v: want a window", cfg.Window, cfg.Warmup)
	}
	l, err := t.Start(ctx, lk, cfg)
	if err != nil {
		return Result{Library: lk.Name(), Keys: cfg.Keys, Goroutines: cfg.Goroutines}, err
	}
	if cfg.Warmup > 0 {
		err = l.Run(ctx, cfg.Warmup, false)
	}
	if err == nil {
		err = l.Run(ctx, cfg.Window, true)
	}
	res, stopErr := l.Stop(ctx)
	return res, cmp.Or(err, stopErr)
}

// Loop is a naive loop on a table that can take turns with the service
// (judge.Turns): its goroutines place orders while it runs and park
// between orders while it is paused.
type Loop struct {
	t      *Table
	lk     Locker
	cfg    Config
	prefix string
	res    Result
	// stored0 is the table's reservations before the loop.
	stored0 int64

	orders, failures atomic.Int64
	unlockFailures   atomic.Int64
	cancel           context.CancelFunc
	wg               sync.WaitGroup
	errs             []error
	failed           atomic.Bool

	mu   sync.Mutex
	cond *sync.Cond
	on   bool // the goroutines may start orders
	stop bool // the goroutines return
	busy int  // orders in progress
}

// Start starts cfg.Goroutines goroutines on the first cfg.Keys rows,
// paused; cfg.Warmup and cfg.Window are Run's, not the loop's.
func (t *Table) Start(ctx context.Context, lk Locker, cfg Config) (*Loop, error) {
	if cfg.Goroutines < 1 || cfg.Keys < 1 || cfg.Keys > len(t.keys) {
		return nil, fmt.Errorf("naive: %d goroutines, %d keys of %d: want ≥ 1 of each, keys within the table", cfg.Goroutines, cfg.Keys, len(t.keys))
	}
	stored0, err := t.reserved(ctx)
	if err != nil {
		return nil, err
	}
	l := &Loop{t: t, lk: lk, cfg: cfg, stored0: stored0, errs: make([]error, cfg.Goroutines),
		prefix: "stockguard-naive-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10] + "-",
		res:    Result{Library: lk.Name(), Keys: cfg.Keys, Goroutines: cfg.Goroutines}}
	l.cond = sync.NewCond(&l.mu)
	// Cancelled on Stop, not left to finish: a redsync waiter on the hot
	// key can retry for seconds. Keys are the loop's own, so what a
	// cancelled acquisition leaves behind expires without harm.
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	for g := range cfg.Goroutines {
		l.wg.Go(func() { l.loop(loopCtx, g) })
	}
	return l, nil
}

// loop is goroutine g's orders.
func (l *Loop) loop(ctx context.Context, g int) {
	rng := rand.New(rand.NewPCG(l.cfg.Seed, uint64(g)))
	for {
		l.mu.Lock()
		for !l.on && !l.stop {
			l.cond.Wait()
		}
		if l.stop {
			l.mu.Unlock()
			return
		}
		l.busy++
		l.mu.Unlock()
		unlockErr, err := l.t.order(ctx, l.lk, l.prefix, l.t.keys[rng.IntN(l.cfg.Keys)])
		l.mu.Lock()
		if l.busy--; l.busy == 0 {
			l.cond.Broadcast()
		}
		l.mu.Unlock()
		switch {
		case err == nil && (unlockErr == nil || errors.Is(unlockErr, ErrUnlockExpires)):
			l.orders.Add(1)
			if unlockErr != nil {
				l.unlockFailures.Add(1)
			}
		case err == nil: // placed, but its key may stay held: no loop can go on
			l.orders.Add(1)
			l.unlockFailures.Add(1)
			l.errs[g] = unlockErr
			l.failed.Store(true)
			l.halt()
			return
		case errors.Is(err, ErrLockFailed):
			l.failures.Add(1)
		case ctx.Err() != nil:
			return
		default:
			l.errs[g] = errors.Join(err, unlockErr)
			l.failed.Store(true)
			l.halt()
			return
		}
	}
}

// halt makes every goroutine return once its order in progress ends.
func (l *Loop) halt() {
	l.mu.Lock()
	l.stop = true
	l.cond.Broadcast()
	l.mu.Unlock()
}

// Run lets the goroutines place orders for d; measured, what they place
// in it counts in the result. A failed order stops the loop, and Run
// says so.
func (l *Loop) Run(ctx context.Context, d time.Duration, measured bool) error {
	if d <= 0 {
		return fmt.Errorf("naive %s: a run of %v", l.lk.Name(), d)
	}
	l.mu.Lock()
	l.on = true
	l.cond.Broadcast()
	l.mu.Unlock()
	o0, f0, u0, start := l.orders.Load(), l.failures.Load(), l.unlockFailures.Load(), time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return fmt.Errorf("naive %s: %w", l.lk.Name(), ctx.Err())
	}
	o1, f1, u1, elapsed := l.orders.Load(), l.failures.Load(), l.unlockFailures.Load(), time.Since(start)
	if l.failed.Load() {
		return fmt.Errorf("naive %s: an order failed; Stop says which", l.lk.Name())
	}
	if measured {
		r := &l.res
		r.Orders, r.LockFailures, r.UnlockFailures = r.Orders+o1-o0, r.LockFailures+f1-f0, r.UnlockFailures+u1-u0
		r.DurationS = tally.Round(r.DurationS+elapsed.Seconds(), 3)
		r.OrdersPerS = tally.Round(float64(r.Orders)/r.DurationS, 1)
		r.TurnsPerS = append(r.TurnsPerS, tally.Round(float64(o1-o0)/elapsed.Seconds(), 1))
	}
	return nil
}

// Pause stops the goroutines from starting orders and waits for those in
// progress to end.
func (l *Loop) Pause(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = false
	for l.busy > 0 && ctx.Err() == nil {
		l.cond.Wait()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("naive %s: %w", l.lk.Name(), err)
	}
	return nil
}

// Stop ends the goroutines and checks the table's reservations against
// the orders counted.
func (l *Loop) Stop(ctx context.Context) (Result, error) {
	l.halt()
	l.cancel()
	l.wg.Wait()
	res := l.res
	if len(res.TurnsPerS) < 2 {
		res.TurnsPerS = nil
	}
	if err := errors.Join(l.errs...); err != nil {
		return res, fmt.Errorf("naive %s: %w", l.lk.Name(), err)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("naive %s: %w", l.lk.Name(), err)
	}
	stored1, err := l.t.reserved(ctx)
	if err != nil {
		return res, err
	}
	res.Total, res.Stored = l.orders.Load(), stored1-l.stored0
	if res.Stored < res.Total || res.Stored > res.Total+int64(l.cfg.Goroutines) {
		return res, fmt.Errorf("%w: %s placed %d, the table gained %d", ErrUnaccounted, l.lk.Name(), res.Total, res.Stored)
	}
	return res, nil
}

// reserved is the units reserved over the whole table, read outside the
// measured window.
func (t *Table) reserved(ctx context.Context) (int64, error) {
	var n int64
	if err := t.pool.QueryRow(ctx, "SELECT coalesce(sum(reserved), 0) FROM "+t.name).Scan(&n); err != nil {
		return 0, fmt.Errorf("naive: read back: %w", err)
	}
	return n, nil
}

// ErrLockFailed marks an acquisition the library gave up on.
var ErrLockFailed = errors.New("lock not acquired")

// ErrUnlockExpires marks a release that failed on a lock whose TTL frees
// it anyway (redsync's). Any other failed release may hold its key for
// good (zk.Lock's node lives as long as its session, and its Lock waits
// without a deadline), so the loop stops on it.
var ErrUnlockExpires = errors.New("unlock failed; the lock expires on its own")

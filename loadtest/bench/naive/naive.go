// Package naive is the bench's naive lock loops: what a developer writes
// with an off-the-shelf lock library and no batching, one process, no
// HTTP: goroutines each taking a key's lock (go-redsync over the Redis
// masters, or go-zookeeper's zk.Lock), reading the row's available
// stock, updating it, and unlocking. The service, with HTTP, three
// processes and fencing, is compared with it on the same keys.
package naive

import (
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
	// LockFailures counts acquisitions the library gave up on (redsync
	// after its default 32 tries); the loop goes on with the next order.
	LockFailures int64 `json:"lock_failures"`
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
// prefixed with the run's so that no two loops share a lock.
func (t *Table) order(ctx context.Context, lk Locker, prefix, sku string) error {
	unlock, err := lk.Lock(ctx, prefix+sku)
	if err != nil {
		return err
	}
	var available int64
	err = t.pool.QueryRow(ctx, "SELECT available FROM "+t.name+" WHERE sku = $1", sku).Scan(&available)
	if err == nil && available < 1 {
		err = ErrSoldOut
	}
	if err == nil {
		_, err = t.pool.Exec(ctx, "UPDATE "+t.name+" SET available = available - 1, reserved = reserved + 1, updated_at = now() WHERE sku = $1", sku)
	}
	return errors.Join(err, unlock())
}

// Run runs the loop on the first cfg.Keys rows: a warm-up, then the
// measured window. Each goroutine picks its keys at random (seeded).
func (t *Table) Run(ctx context.Context, lk Locker, cfg Config) (Result, error) {
	if cfg.Goroutines < 1 || cfg.Keys < 1 || cfg.Keys > len(t.keys) || cfg.Window <= 0 {
		return Result{}, fmt.Errorf("naive: %d goroutines, %d keys of %d, window %v: want ≥ 1 of each, keys within the table", cfg.Goroutines, cfg.Keys, len(t.keys), cfg.Window)
	}
	res := Result{Library: lk.Name(), Keys: cfg.Keys, Goroutines: cfg.Goroutines}
	stored0, err := t.reserved(ctx)
	if err != nil {
		return res, err
	}
	prefix := "stockguard-naive-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10] + "-"
	var orders, failures atomic.Int64
	var stop atomic.Bool
	loopCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, cfg.Goroutines)
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(g)))
			for !stop.Load() {
				err := t.order(loopCtx, lk, prefix, t.keys[rng.IntN(cfg.Keys)])
				switch {
				case err == nil:
					orders.Add(1)
				case errors.Is(err, ErrLockFailed):
					failures.Add(1)
				case loopCtx.Err() != nil:
					return
				default:
					errs[g] = err
					stop.Store(true)
					return
				}
			}
		})
	}
	wait := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	wait(cfg.Warmup)
	o0, f0, start := orders.Load(), failures.Load(), time.Now()
	wait(cfg.Window)
	o1, f1, elapsed := orders.Load(), failures.Load(), time.Since(start)
	// Cancelled, not left to finish: a redsync waiter on the hot key can
	// retry for seconds. Keys are the run's own, so what a cancelled
	// acquisition leaves behind expires without harm.
	stop.Store(true)
	cancel()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("naive %s: %w", lk.Name(), err)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("naive %s: %w", lk.Name(), err)
	}
	res.DurationS, res.Orders, res.LockFailures = tally.Round(elapsed.Seconds(), 3), o1-o0, f1-f0
	res.OrdersPerS = tally.Round(float64(res.Orders)/elapsed.Seconds(), 1)
	stored1, err := t.reserved(ctx)
	if err != nil {
		return res, err
	}
	res.Total, res.Stored = orders.Load(), stored1-stored0
	if res.Stored < res.Total || res.Stored > res.Total+int64(cfg.Goroutines) {
		return res, fmt.Errorf("%w: %s placed %d, the table gained %d", ErrUnaccounted, lk.Name(), res.Total, res.Stored)
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

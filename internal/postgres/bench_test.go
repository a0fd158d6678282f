package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// Run with the local stack up:
//
//	go test -run '^$' -bench . -benchtime 3s ./internal/postgres/

// benchStore opens a store with a pool of conns on a fresh, migrated
// database that holds one hot SKU with plenty of stock, claimed by fence f.
func benchStore(b *testing.B, conns int) (*Store, inventory.Fence) {
	b.Helper()
	ctx := context.Background()
	s, err := Open(ctx, stacktest.NewDatabase(b, ctx), WithMaxConns(conns))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if _, err := Migrate(ctx, s.DB()); err != nil {
		b.Fatal(err)
	}
	f := inventory.Fence{SKU: "hot", Token: 1, Holder: uuid.New()}
	got, err := s.Claim(ctx, []inventory.Fence{f}, true)
	if err != nil {
		b.Fatal(err)
	}
	k := got["hot"]
	k.Available, k.Received = inventory.MaxStock, inventory.MaxStock
	if err := s.Write(ctx, []inventory.Fence{f}, inventory.Write{SKUs: []inventory.SKU{k}}); err != nil {
		b.Fatal(err)
	}
	return s, f
}

// orderWrite is the write of n one-unit orders of the hot SKU, as a batch
// decides it; avail is the stock left after them.
func orderWrite(f inventory.Fence, n int, avail int64) inventory.Write {
	now := time.Now()
	w := inventory.Write{SKUs: []inventory.SKU{{SKU: f.SKU, Available: avail, Reserved: inventory.MaxStock - avail,
		Received: inventory.MaxStock}}}
	for range n {
		w.Orders = append(w.Orders, &inventory.Order{ID: uuid.New(), Status: inventory.StatusReserved,
			RequestHash: "h", CreatedAt: now, ExpiresAt: now.Add(time.Hour),
			Lines: []inventory.Line{{SKU: f.SKU, Quantity: 1, FenceToken: f.Token}}})
	}
	return w
}

func perSecond(b *testing.B, start time.Time, n int, unit string) {
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), unit)
}

// BenchmarkHotRowCeiling is the physical limit of one hot SKU: 16
// connections, no lock at all, each transaction one fenced conditional
// update of the hot row. "update" is the bare single-statement update;
// "order" is the store's whole write of one order (fenced counters, order,
// line) in its one statement. Postgres serialises them on the row lock; the
// rate is what any design placing one order per transaction can reach.
func BenchmarkHotRowCeiling(b *testing.B) {
	const conns = 16
	b.Run("update", func(b *testing.B) {
		s, f := benchStore(b, conns)
		ctx := context.Background()
		const q = `UPDATE skus SET available = available - 1, reserved = reserved + 1, updated_at = now()
			WHERE sku = $1 AND fence_token = $2 AND fence_holder = $3`
		b.SetParallelism(max(1, conns/runtime.GOMAXPROCS(0))) // 16 goroutines on 2 cores
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				err := s.withPgx(ctx, func(c *pgx.Conn) error {
					tag, err := c.Exec(ctx, q, f.SKU, int64(f.Token), f.Holder)
					if err == nil && tag.RowsAffected() != 1 {
						err = fmt.Errorf("fenced update matched %d rows", tag.RowsAffected())
					}
					return err
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		perSecond(b, start, b.N, "orders/s")
	})
	b.Run("order", func(b *testing.B) {
		s, f := benchStore(b, conns)
		ctx := context.Background()
		var left atomic.Int64
		left.Store(inventory.MaxStock)
		b.SetParallelism(max(1, conns/runtime.GOMAXPROCS(0))) // 16 goroutines on 2 cores
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Write(ctx, []inventory.Fence{f}, orderWrite(f, 1, left.Add(-1))); err != nil {
					b.Error(err)
					return
				}
			}
		})
		perSecond(b, start, b.N, "orders/s")
	})
}

// BenchmarkCoalescedWrite is one batch as a lease holder runs it, serially:
// claim once, then one write of n orders. orders/s is the hot SKU's rate
// when every batch has n orders and the lock hand-off costs nothing.
func BenchmarkCoalescedWrite(b *testing.B) {
	for _, n := range []int{1, 4, 16, 64, 256} {
		b.Run(fmt.Sprintf("orders=%d", n), func(b *testing.B) {
			s, f := benchStore(b, 4)
			ctx := context.Background()
			left := int64(inventory.MaxStock)
			start := time.Now()
			for i := range b.N {
				f := inventory.Fence{SKU: f.SKU, Token: f.Token + 1 + uint64(i), Holder: uuid.New()}
				if _, err := s.Claim(ctx, []inventory.Fence{f}, false); err != nil {
					b.Fatal(err)
				}
				left -= int64(n)
				if err := s.Write(ctx, []inventory.Fence{f}, orderWrite(f, n, left)); err != nil {
					b.Fatal(err)
				}
			}
			perSecond(b, start, b.N*n, "orders/s")
		})
	}
}

// BenchmarkRefusedWrite is a batch's write refused for one order whose
// idempotency key another order holds (a client's retry of a placed
// order): the write, aborted by its guard, and the questions that name the
// key, all under the batch's leases.
func BenchmarkRefusedWrite(b *testing.B) {
	s, f := benchStore(b, 1)
	ctx := context.Background()
	placed := orderWrite(f, 1, inventory.MaxStock-1)
	placed.Orders[0].IdempotencyKey = "taken"
	if err := s.Write(ctx, []inventory.Fence{f}, placed); err != nil {
		b.Fatal(err)
	}
	w := orderWrite(f, 16, inventory.MaxStock-17)
	for i, o := range w.Orders {
		o.IdempotencyKey = fmt.Sprintf("key-%02d", i)
	}
	w.Orders[7].IdempotencyKey = "taken"
	for b.Loop() {
		var taken *inventory.KeyTakenError
		if err := s.Write(ctx, []inventory.Fence{f}, w); !errors.As(err, &taken) {
			b.Fatalf("write = %v, want a KeyTakenError", err)
		}
	}
}

// BenchmarkHotWrite runs the hot write of one order, serially on one
// connection, through gorm's raw-SQL path and through pgx directly: the
// figure behind the choice in pgx.go.
func BenchmarkHotWrite(b *testing.B) {
	gormSQL, _ := writeStatements(true)
	for _, path := range []string{"gorm", "pgx"} {
		b.Run(path, func(b *testing.B) {
			s, f := benchStore(b, 1)
			ctx := context.Background()
			byKey := map[string]inventory.Fence{f.SKU: f}
			left := int64(inventory.MaxStock)
			b.ReportAllocs()
			start, cpu := time.Now(), cpuTime()
			for range b.N {
				left--
				a := newWriteArgs(byKey, orderWrite(f, 1, left))
				var err error
				if path == "gorm" {
					err = s.db.WithContext(ctx).Exec(gormSQL, a.gorm()...).Error
				} else {
					err = s.withPgx(ctx, func(c *pgx.Conn) error {
						_, err := c.Exec(ctx, s.writePgx, a.pgx()...)
						return err
					})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			perSecond(b, start, b.N, "writes/s")
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkClaim compares the claim, the other hot statement, the same way.
func BenchmarkClaim(b *testing.B) {
	for _, path := range []string{"gorm", "pgx"} {
		b.Run(path, func(b *testing.B) {
			s, f := benchStore(b, 1)
			ctx := context.Background()
			b.ReportAllocs()
			cpu := cpuTime()
			for i := range b.N {
				f := inventory.Fence{SKU: f.SKU, Token: f.Token + 1 + uint64(i), Holder: f.Holder}
				var err error
				if path == "gorm" {
					var rows []skuRow
					err = s.db.WithContext(ctx).Raw(claimSQL, textArray{f.SKU}, int64Array{int64(f.Token)},
						uuidArray{f.Holder}).Scan(&rows).Error
					if err == nil && len(rows) != 1 {
						err = fmt.Errorf("claimed %d rows", len(rows))
					}
				} else {
					_, err = s.Claim(ctx, []inventory.Fence{f}, false)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// gorm returns the arguments the way the gorm path needs them: gorm expands
// a bare Go slice after "(" into a list, so arrays go as literals.
func (a *writeArgs) gorm() []any {
	return []any{uuidArray(a.moveIDs), textArray(a.moveFrom), textArray(a.moveTo),
		textArray(a.skus), int64Array(a.avail), int64Array(a.resv), int64Array(a.sold), int64Array(a.recv),
		int64Array(a.tokens), uuidArray(a.holders), a.wantMoves,
		uuidArray(a.orderIDs), textArray(a.keys), textArray(a.hashes), textArray(a.statuses),
		timeArray(a.expires), timeArray(a.created),
		uuidArray(a.lineOrders), textArray(a.lineSKUs), int64Array(a.lineQty), int64Array(a.lineTokens),
		int32Array(a.linePos),
		a.wantSKUs, a.wantMoves, a.wantOrds}
}

type timeArray []time.Time

func (a timeArray) Value() (driver.Value, error) {
	parts := make([]string, len(a))
	for i, t := range a {
		parts[i] = `"` + t.Format(time.RFC3339Nano) + `"`
	}
	return "{" + strings.Join(parts, ",") + "}", nil
}

type int32Array []int32

func (a int32Array) Value() (driver.Value, error) {
	parts := make([]string, len(a))
	for i, n := range a {
		parts[i] = strconv.Itoa(int(n))
	}
	return "{" + strings.Join(parts, ",") + "}", nil
}

package bench

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
	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/loadtest/tally"
)

// ceilingWrite is the fenced conditional write of one order on a row,
// the statement shape the service's final write has (DESIGN.md, "Fenced
// writes"); sent on its own, each is one transaction.
const ceilingWrite = `UPDATE %s SET available = available - 1, reserved = reserved + 1, updated_at = now()
	WHERE sku = $1 AND fence_token = $2 AND fence_holder = $3`

// CeilingSample is one measurement of the store ceiling.
type CeilingSample struct {
	// Before names the backend whose hot-SKU runs followed the sample.
	Before    string    `json:"before"`
	Round     int       `json:"round,omitempty"`
	At        time.Time `json:"at"`
	DurationS float64   `json:"duration_s"`
	Writes    int64     `json:"writes"`
	PerS      float64   `json:"orders_per_s"`
	LoadAvg1  float64   `json:"load_avg_1m"`
	// Rows is how many rows the writes were spread over at random; 1 (or
	// absent, in older results) is the hot row.
	Rows int `json:"rows,omitempty"`
	// TurnsPerS is each turn's rate when the sample was taken in turns
	// with the window judged against it; absent when taken before it.
	TurnsPerS []float64 `json:"turns_per_s,omitempty"`
}

func (s CeilingSample) round() int { return s.Round }

// medianPerS is the samples' median rate.
func medianPerS(samples []CeilingSample) float64 {
	per := make([]float64, len(samples))
	for i, s := range samples {
		per[i] = s.PerS
	}
	return tally.Round(median(per), 1)
}

func roundS(d time.Duration) float64 { return tally.Round(d.Seconds(), 3) }

func perS(n int64, d time.Duration) float64 { return tally.Round(float64(n)/d.Seconds(), 1) }

// StoreCeiling is the physical limit of one hot SKU: fenced single-row
// conditional writes, one order per transaction, no lock, from Conns
// connections that Postgres serialises on the row lock. Every coalesced
// run is compared with the sample taken just before it, so that both saw
// the same neighbours on a shared machine.
type StoreCeiling struct {
	Method     string          `json:"method"`
	Conns      int             `json:"conns"`
	Samples    []CeilingSample `json:"samples"`
	MedianPerS float64         `json:"median_orders_per_s"`
}

// ceilingProbe holds the connections and the scratch table of the ceiling.
type ceilingProbe struct {
	conns []*pgx.Conn
	table string
	n     int // rows inserted so far: each sample writes a fresh row
}

// openCeiling connects conns times and creates a scratch table shaped like
// skus (LIKE ... INCLUDING ALL: the same columns, CHECKs and key, so the
// row costs what a SKU row costs). The service's migrations must have run.
func openCeiling(ctx context.Context, databaseURL string, conns int) (*ceilingProbe, error) {
	p := &ceilingProbe{table: "stockguard_bench_ceiling_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]}
	for range conns {
		c, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("store ceiling: connect: %w", err)
		}
		p.conns = append(p.conns, c)
	}
	if _, err := p.conns[0].Exec(ctx, "CREATE TABLE "+p.table+" (LIKE skus INCLUDING ALL)"); err != nil {
		p.close()
		return nil, fmt.Errorf("store ceiling: scratch table: %w", err)
	}
	return p, nil
}

// measure runs the writes from every connection for d, each to one of
// rows fresh rows chosen at random (one: the hot row), and returns the
// writes completed and the time they took.
func (p *ceilingProbe) measure(ctx context.Context, d time.Duration, rows int) (int64, time.Duration, error) {
	w, err := p.prepare(ctx, rows)
	if err != nil {
		return 0, 0, err
	}
	return w.write(ctx, d)
}

// ceilingWriter is one sample's rows, ready to be written.
type ceilingWriter struct {
	p      *ceilingProbe
	skus   []string
	token  int64
	holder uuid.UUID
	seed   uint64
}

// prepare inserts rows fresh rows for a sample and prepares the write on
// every connection.
func (p *ceilingProbe) prepare(ctx context.Context, rows int) (*ceilingWriter, error) {
	p.n++
	w := &ceilingWriter{p: p, skus: make([]string, rows), token: 1, holder: uuid.New(), seed: uint64(p.n)}
	for i := range w.skus {
		w.skus[i] = fmt.Sprintf("c%d-%d", p.n, i)
	}
	if _, err := p.conns[0].Exec(ctx, "INSERT INTO "+p.table+
		" (sku, available, received, fence_token, fence_holder) SELECT k, $2, $2, $3, $4 FROM unnest($1::text[]) k",
		w.skus, int64(1)<<50, w.token, w.holder); err != nil {
		return nil, fmt.Errorf("store ceiling: rows: %w", err)
	}
	q := fmt.Sprintf(ceilingWrite, p.table)
	// Prepare outside the timed window (pgx caches the statement per
	// connection), as a service's warm pool would have.
	for _, c := range p.conns {
		if _, err := c.Prepare(ctx, "ceiling", q); err != nil {
			return nil, fmt.Errorf("store ceiling: prepare: %w", err)
		}
	}
	return w, nil
}

// write runs the writes from every connection for d and returns the
// writes completed and the time they took; every writer has returned
// when it does.
func (w *ceilingWriter) write(ctx context.Context, d time.Duration) (int64, time.Duration, error) {
	w.seed++ // each stretch its own rows' sequence
	var writes atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(w.p.conns))
	start := time.Now()
	stop := start.Add(d)
	for i, c := range w.p.conns {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(w.seed, uint64(i)))
			for time.Now().Before(stop) && ctx.Err() == nil {
				tag, err := c.Exec(ctx, "ceiling", w.skus[rng.IntN(len(w.skus))], w.token, w.holder)
				if err == nil && tag.RowsAffected() != 1 {
					err = fmt.Errorf("fenced write matched %d rows", tag.RowsAffected())
				}
				if err != nil {
					errs[i] = err
					return
				}
				writes.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, 0, fmt.Errorf("store ceiling: %w", err)
	}
	return writes.Load(), elapsed, ctx.Err()
}

// ceilingTurns is the spread ceiling as a side of judge.Turns, so that
// the window judged against it and the ceiling see the same minutes of a
// shared machine. Its writers end with each Run, so Pause has nothing to
// stop.
type ceilingTurns struct {
	w       *ceilingWriter
	writes  int64
	elapsed time.Duration
	turns   []float64
}

// turns prepares rows fresh rows for a ceiling taken in turns.
func (p *ceilingProbe) turns(ctx context.Context, rows int) (*ceilingTurns, error) {
	w, err := p.prepare(ctx, rows)
	if err != nil {
		return nil, err
	}
	return &ceilingTurns{w: w}, nil
}

// Run implements judge.Turner.
func (t *ceilingTurns) Run(ctx context.Context, d time.Duration, measured bool) error {
	n, elapsed, err := t.w.write(ctx, d)
	if err != nil {
		return err
	}
	if measured {
		t.writes, t.elapsed = t.writes+n, t.elapsed+elapsed
		t.turns = append(t.turns, perS(n, elapsed))
	}
	return nil
}

// Pause implements judge.Turner.
func (t *ceilingTurns) Pause(context.Context) error { return nil }

// fill sets s's figures from the measured turns, and reports whether
// there were any (a window that failed in its warm-up leaves none, and no
// rate).
func (t *ceilingTurns) fill(s *CeilingSample) bool {
	if t.elapsed <= 0 {
		return false
	}
	s.Writes, s.DurationS, s.PerS, s.TurnsPerS = t.writes, roundS(t.elapsed), perS(t.writes, t.elapsed), t.turns
	return true
}

// close drops the scratch table (with a fresh context: the run's may be
// cancelled) and closes the connections.
func (p *ceilingProbe) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(p.conns) > 0 {
		_, _ = p.conns[0].Exec(ctx, "DROP TABLE IF EXISTS "+p.table)
	}
	for _, c := range p.conns {
		_ = c.Close(ctx)
	}
}

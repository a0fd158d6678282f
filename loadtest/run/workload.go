package run

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// MaxOrders bounds how many orders one run may generate, and MaxOrderLines
// their lines (the orders times --lines' hi), so that a typo in --orders,
// --rate or --lines cannot exhaust memory: setup keeps every order and its
// encoded body, some 250 bytes an order and 70 a line, so the bounds keep
// that under 2.5 GB, and MaxOrders orders of the default 1..3 lines fit.
const (
	MaxOrders     = 5_000_000
	MaxOrderLines = 15_000_000
)

// Range is an inclusive integer range, written "lo..hi" or just "n" on the
// command line. It implements flag.Value.
type Range struct {
	Min, Max int
}

// parseRange parses "lo..hi" or "n".
func parseRange(s string) (Range, error) {
	lo, hi, found := strings.Cut(strings.TrimSpace(s), "..")
	if !found {
		hi = lo
	}
	a, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil {
		return Range{}, fmt.Errorf("range %q: %w", s, err)
	}
	b, err := strconv.Atoi(strings.TrimSpace(hi))
	if err != nil {
		return Range{}, fmt.Errorf("range %q: %w", s, err)
	}
	if a < 1 || b < a {
		return Range{}, fmt.Errorf("range %q: want 1 <= lo <= hi", s)
	}
	return Range{Min: a, Max: b}, nil
}

// String formats the range as "lo..hi".
func (r Range) String() string { return fmt.Sprintf("%d..%d", r.Min, r.Max) }

// Set parses the flag value.
func (r *Range) Set(s string) error {
	v, err := parseRange(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// MarshalJSON writes the range as [lo, hi].
func (r Range) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("[%d,%d]", r.Min, r.Max)), nil
}

// UnmarshalJSON reads [lo, hi].
func (r *Range) UnmarshalJSON(b []byte) error {
	var v [2]int
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("range: %w", err)
	}
	*r = Range{Min: v[0], Max: v[1]}
	return nil
}

// Workload describes what a run orders. The same Workload (seed included)
// always generates the same orders, so backends can be compared on equal
// terms; only SKU names differ between runs.
type Workload struct {
	SKUs       int     // number of SKUs, each created fresh with Stock units
	Stock      int     // units per SKU
	Lines      Range   // lines per order (distinct SKUs)
	Qty        Range   // units per line
	Zipf       float64 // exponent of the hot-SKU skew; 0 is uniform
	RetryShare float64 // share of orders that are deliberately sent twice with one key
	Seed       uint64  // seed of the generator
}

// Validate reports the first invalid field.
func (w Workload) Validate() error {
	switch {
	case w.SKUs < 1 || w.SKUs > 100_000:
		return fmt.Errorf("skus %d: want 1..100000", w.SKUs)
	case w.Stock < 0 || w.Stock > 1_000_000_000:
		return fmt.Errorf("stock %d: want 0..1000000000", w.Stock)
	case w.Lines.Min < 1 || w.Lines.Max < w.Lines.Min || w.Lines.Max > 100:
		return fmt.Errorf("lines %s: want 1 <= lo <= hi <= 100", w.Lines)
	case w.Lines.Min > w.SKUs:
		return fmt.Errorf("lines %s: an order cannot have more distinct lines than --skus=%d", w.Lines, w.SKUs)
	case w.Qty.Min < 1 || w.Qty.Max < w.Qty.Min || w.Qty.Max > 1_000_000:
		return fmt.Errorf("qty %s: want 1 <= lo <= hi <= 1000000", w.Qty)
	case w.Zipf < 0 || w.Zipf > 10 || math.IsNaN(w.Zipf):
		return fmt.Errorf("zipf %v: want 0..10", w.Zipf)
	case w.RetryShare < 0 || w.RetryShare > 1 || math.IsNaN(w.RetryShare):
		return fmt.Errorf("retry-share %v: want 0..1", w.RetryShare)
	}
	return nil
}

// Line is one generated order line: an index into the run's SKUs and a quantity.
type Line struct {
	SKU      int
	Quantity int
}

// Order is one generated order. Retry marks an order that the runner sends a
// second time with the same idempotency key and body once the first answer
// is in, as a client that lost the answer would.
type Order struct {
	Seq   int
	Lines []Line
	Retry bool
}

// Units is the total quantity over the order's lines.
func (o Order) Units() int {
	n := 0
	for _, l := range o.Lines {
		n += l.Quantity
	}
	return n
}

// Generate returns n orders. Each order touches distinct SKUs, drawn with
// the Zipf skew, in the order drawn.
func (w Workload) Generate(n int) ([]Order, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if n < 0 || n > MaxOrders {
		return nil, fmt.Errorf("orders %d: want 0..%d", n, MaxOrders)
	}
	// Two fixed stream constants: the seed alone selects the sequence.
	rng := rand.New(rand.NewPCG(w.Seed, 0x9e3779b97f4a7c15))
	pick := newSKUPicker(w.SKUs, w.Zipf)
	orders := make([]Order, n)
	used := make(map[int]bool, w.Lines.Max)
	for i := range orders {
		nl := w.Lines.Min + rng.IntN(w.Lines.Max-w.Lines.Min+1)
		nl = min(nl, w.SKUs)
		clear(used)
		lines := make([]Line, 0, nl)
		// Heavy skew makes repeats likely; the attempts are bounded and the
		// remainder is filled deterministically with the lowest unused SKUs.
		for attempt := 0; len(lines) < nl && attempt < 64*nl; attempt++ {
			s := pick(rng.Float64())
			if used[s] {
				continue
			}
			used[s] = true
			lines = append(lines, Line{SKU: s})
		}
		for s := 0; len(lines) < nl && s < w.SKUs; s++ {
			if !used[s] {
				used[s] = true
				lines = append(lines, Line{SKU: s})
			}
		}
		for j := range lines {
			lines[j].Quantity = w.Qty.Min + rng.IntN(w.Qty.Max-w.Qty.Min+1)
		}
		orders[i] = Order{Seq: i, Lines: lines, Retry: rng.Float64() < w.RetryShare}
	}
	return orders, nil
}

// newSKUPicker maps a uniform u in [0,1) to an SKU index with probability
// proportional to 1/(k+1)^s. s = 0 is uniform. Unlike math/rand's Zipf it
// accepts any s >= 0 and a bounded domain.
func newSKUPicker(k int, s float64) func(u float64) int {
	cdf := make([]float64, k)
	total := 0.0
	for i := range cdf {
		total += 1 / math.Pow(float64(i+1), s)
		cdf[i] = total
	}
	for i := range cdf {
		cdf[i] /= total
	}
	return func(u float64) int {
		i := sort.SearchFloat64s(cdf, u)
		// Rounding can leave the last cumulative value a hair below 1.
		return min(i, k-1)
	}
}

// errNoOrders is returned when a run would send nothing.
var errNoOrders = errors.New("the workload has no orders: set --orders, or --rate with --duration")

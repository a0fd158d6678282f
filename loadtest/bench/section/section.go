// Package section reads, from the instances' /metrics at the edges of a
// judged window, what their critical sections did in it: how many holds,
// how long each kept its leases, what each spent on the claim and the
// writes. On a hot SKU that is where the window went: one key's holds
// follow each other, so what they leave of the window is the hand-offs
// between holders (a release, the next holder's wake-up, its acquisition).
//
// A hold that spans an edge counts in the window it ends in: over a 10 s
// window of holds of a few milliseconds, a rounding error.
package section

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stockguard/stockguard/loadtest/tally"
)

// The service's series read here (internal/metrics).
const (
	holdSeries  = "stockguard_lock_hold_seconds"
	storeSeries = "stockguard_store_call_seconds"
	batchSeries = "stockguard_batch_orders"
)

// maxBody bounds one /metrics answer: a few hundred series, far below.
const maxBody = 8 << 20

// sum is a histogram's _sum and _count, added over instances and labels.
type sum struct {
	Sum   float64
	Count uint64
}

// Snapshot is the series at one instant, added over the instances, by
// name ("hold", "claim", "write", "orders").
type Snapshot struct {
	series map[string]sum
}

// Meter scrapes a fixed set of instances.
type Meter struct {
	urls []string
	hc   *http.Client
}

// NewMeter reads URL/metrics of each instance through hc.
func NewMeter(urls []string, hc *http.Client) *Meter { return &Meter{urls: urls, hc: hc} }

// Snapshot scrapes every instance now. An instance that does not answer
// fails it: a sum without one instance's holds would read as hand-offs.
func (m *Meter) Snapshot(ctx context.Context) (Snapshot, error) {
	s := Snapshot{series: map[string]sum{}}
	for _, u := range m.urls {
		fams, err := m.scrape(ctx, u)
		if err != nil {
			return s, err
		}
		add(s.series, "hold", fams[holdSeries], nil)
		add(s.series, "claim", fams[storeSeries], label("call", "claim"))
		add(s.series, "write", fams[storeSeries], label("call", "write"))
		add(s.series, "orders", fams[batchSeries], nil)
	}
	return s, nil
}

func (m *Meter) scrape(ctx context.Context, base string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	// The text format: it is what every build of the service serves, and
	// what the parser below reads.
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	res, err := m.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("section: scrape %s: %w", base, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("section: scrape %s: %s", base, res.Status)
	}
	// A body cut at the bound could parse, and its sums would be short:
	// past the bound is an error.
	body, err := io.ReadAll(io.LimitReader(res.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("section: scrape %s: %w", base, err)
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("section: scrape %s: %w", base, ErrTooLarge)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("section: scrape %s: %w", base, err)
	}
	if fams[holdSeries] == nil {
		return nil, fmt.Errorf("section: scrape %s: %w", base, ErrNoSeries)
	}
	return fams, nil
}

// ErrTooLarge means an instance's /metrics is larger than maxBody.
var ErrTooLarge = errors.New("metrics larger than the scrape reads")

// ErrNoSeries means an instance serves /metrics without the hold series:
// a build from before them.
var ErrNoSeries = errors.New("no " + holdSeries + " series")

// label matches a metric with name=value among its labels.
func label(name, value string) func(*dto.Metric) bool {
	return func(m *dto.Metric) bool {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue() == value
			}
		}
		return false
	}
}

// add adds fam's histograms (those match keeps, or all) into into[key].
func add(into map[string]sum, key string, fam *dto.MetricFamily, match func(*dto.Metric) bool) {
	s := into[key]
	for _, m := range fam.GetMetric() {
		if h := m.GetHistogram(); h != nil && (match == nil || match(m)) {
			s.Sum += h.GetSampleSum()
			s.Count += h.GetSampleCount()
		}
	}
	into[key] = s
}

// Window is what the critical sections did between two snapshots.
type Window struct {
	DurationS float64 `json:"duration_s"`
	// Holds is how many sets of leases were let go of in the window.
	Holds uint64 `json:"holds"`
	// HeldShare is the holds' time over the window's: on one key, the
	// share of the window it was held; over many, the holds in progress
	// on average.
	HeldShare float64 `json:"held_share"`
	// HoldMs, ClaimMs and WriteMs are means, per hold and per call.
	HoldMs  float64 `json:"hold_ms"`
	Claims  uint64  `json:"claims"`
	ClaimMs float64 `json:"claim_ms"`
	Writes  uint64  `json:"writes"`
	WriteMs float64 `json:"write_ms"`
	// OrdersPerHold counts the orders the holds' writes placed.
	OrdersPerHold float64 `json:"orders_per_hold"`
	// HandOffMs is, on one key, the window its holds left, per hold: the
	// time from one holder's release to the next holder's acquisition.
	// Zero over many keys, whose holds overlap.
	HandOffMs float64 `json:"hand_off_ms,omitempty"`
}

// Span is the two snapshots around one measured stretch of a window.
type Span struct{ Before, After Snapshot }

// Between is what the instances did from before to after, on keys keys,
// in a window of length d.
func Between(before, after Snapshot, keys int, d time.Duration) Window {
	return Across([]Span{{before, after}}, keys, d)
}

// Across is what the instances did within the spans, added up: a window
// measured in turns (judge.Turns). Its length is the load's own time
// within the spans, not the spans': a scrape takes time in which no order
// is sent, and on one key the hand-offs are what the holds left of the
// load's time, not of the scrapes or of the other side's turns.
func Across(spans []Span, keys int, length time.Duration) Window {
	d := length.Seconds()
	var hold, claim, write, orders sum
	for _, sp := range spans {
		delta := func(into *sum, k string) {
			a, b := sp.After.series[k], sp.Before.series[k]
			if a.Count < b.Count { // an instance restarted: nothing to say
				return
			}
			into.Sum += a.Sum - b.Sum
			into.Count += a.Count - b.Count
		}
		delta(&hold, "hold")
		delta(&claim, "claim")
		delta(&write, "write")
		delta(&orders, "orders")
	}
	w := Window{DurationS: tally.Round(d, 3), Holds: hold.Count, Claims: claim.Count, Writes: write.Count}
	if d > 0 {
		w.HeldShare = tally.Round(hold.Sum/d, 3)
	}
	w.HoldMs = meanMs(hold)
	w.ClaimMs = meanMs(claim)
	w.WriteMs = meanMs(write)
	if hold.Count > 0 {
		w.OrdersPerHold = tally.Round(orders.Sum/float64(hold.Count), 1)
		if keys == 1 {
			w.HandOffMs = tally.Round(math.Max(d-hold.Sum, 0)*1000/float64(hold.Count), 2)
		}
	}
	return w
}

func meanMs(s sum) float64 {
	if s.Count == 0 {
		return 0
	}
	return tally.Round(s.Sum*1000/float64(s.Count), 2)
}

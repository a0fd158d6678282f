// Package judge is the outside load generator of the bench: vegeta, as a
// library, sending one-unit single-line orders as fast as 64 workers can
// (Rate{Freq: 0}), round-robin over the instances, each order with an
// Idempotency-Key of its own. Its figures, not the project's own
// generator's, decide the targets: a generator the service's authors did
// not write cannot share its blind spots.
package judge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/stockguard/stockguard/loadtest/tally"
)

// Config is one attack: a warm-up, then the measured window.
type Config struct {
	URLs    []string // the instances, round-robin
	SKUs    []string // one: the hot SKU; many: each order picks one
	Workers int
	Warmup  time.Duration
	Window  time.Duration
	// KeyPrefix starts every Idempotency-Key; a run's own, so that no two
	// attacks share a key.
	KeyPrefix   string
	HoldSeconds int
	Seed        uint64
	// RequestTimeout bounds each request.
	RequestTimeout time.Duration
	// OnWindow, if set, is called just before the measured window starts
	// (begin true) and just after its last answer (begin false): where the
	// caller reads the CPU counters.
	OnWindow func(begin bool)
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case len(c.URLs) == 0:
		return errors.New("judge: no URLs")
	case len(c.SKUs) == 0:
		return errors.New("judge: no SKUs")
	case c.Workers < 1:
		return fmt.Errorf("judge: workers %d: want ≥ 1", c.Workers)
	case c.Warmup < 0 || c.Window <= 0 || c.RequestTimeout <= 0:
		return errors.New("judge: warm-up ≥ 0, window and request timeout > 0")
	case c.KeyPrefix == "":
		return errors.New("judge: no key prefix")
	}
	return nil
}

// Result is the measured window of one attack.
type Result struct {
	DurationS float64 `json:"duration_s"`
	Requests  uint64  `json:"requests"`
	// Created counts the 201s; OrdersPerS is Created per second of the
	// window, the judge's figure.
	Created    int64   `json:"created"`
	OrdersPerS float64 `json:"orders_per_s"`
	// LatencyMs is every answer's latency, vegeta's own figure;
	// CreatedLatencyMs the 201s' alone, which the latency targets judge: a
	// fast 503 is no order served.
	LatencyMs        tally.LatencySummary `json:"latency_ms"`
	CreatedLatencyMs tally.LatencySummary `json:"created_latency_ms"`
	// Status counts the answers by HTTP status; "0" is a transport error.
	Status map[string]int `json:"status"`
	// Unsettled counts the answers that leave their order's outcome open
	// (no answer, or a 5xx): each may or may not have reserved its unit.
	Unsettled int64 `json:"unsettled"`
	// Errors are vegeta's distinct error strings, at most maxErrors.
	Errors []string `json:"errors,omitempty"`
	// WarmupCreated and WarmupUnsettled count the warm-up's 201s and
	// unsettled answers: units the store holds beyond the window's.
	WarmupCreated   int64 `json:"warmup_created"`
	WarmupUnsettled int64 `json:"warmup_unsettled"`
}

const maxErrors = 5

// orderLine and order are the service's request body (api/openapi.yaml,
// OrderRequest).
type orderLine struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

type order struct {
	Lines       []orderLine `json:"lines"`
	HoldSeconds int         `json:"hold_seconds,omitempty"`
}

// Attack runs the warm-up, then the measured window, on one HTTP client
// so that the window starts with warm connections.
func Attack(ctx context.Context, c Config) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	bodies := make([][]byte, len(c.SKUs))
	for i, s := range c.SKUs {
		b, err := json.Marshal(order{Lines: []orderLine{{SKU: s, Quantity: 1}}, HoldSeconds: c.HoldSeconds})
		if err != nil {
			return Result{}, fmt.Errorf("judge: %w", err)
		}
		bodies[i] = b
	}
	hc := &http.Client{Timeout: c.RequestTimeout, Transport: &http.Transport{
		MaxIdleConnsPerHost: c.Workers, MaxIdleConns: c.Workers * len(c.URLs), IdleConnTimeout: time.Minute}}
	defer hc.CloseIdleConnections()
	var seq atomic.Uint64
	tr := targeter(c, bodies, &seq)
	var warm Result
	if c.Warmup > 0 {
		m, _, err := attack(ctx, hc, c, tr, c.Warmup, "warmup")
		if err != nil {
			return warm, err
		}
		warm.WarmupCreated, warm.WarmupUnsettled = int64(m.StatusCodes["201"]), unsettled(m.StatusCodes)
	}
	if c.OnWindow != nil {
		c.OnWindow(true)
	}
	m, created, err := attack(ctx, hc, c, tr, c.Window, "window")
	if c.OnWindow != nil {
		c.OnWindow(false)
	}
	if err != nil {
		return warm, err
	}
	res := summarize(m, created)
	res.WarmupCreated, res.WarmupUnsettled = warm.WarmupCreated, warm.WarmupUnsettled
	return res, nil
}

// unsettled counts the answers, by status, that leave an order's outcome
// open: no answer ("0") or a 5xx.
func unsettled(status map[string]int) int64 {
	var n int64
	for code, count := range status {
		if c, err := strconv.Atoi(code); err == nil && (c == 0 || c >= 500) {
			n += int64(count)
		}
	}
	return n
}

// targeter sends order n to instance n mod len(URLs), for the SKU that a
// hash of the seed and n picks: deterministic, and safe for the workers'
// concurrent calls without a lock.
func targeter(c Config, bodies [][]byte, seq *atomic.Uint64) vegeta.Targeter {
	return func(t *vegeta.Target) error {
		n := seq.Add(1) - 1
		t.Method, t.URL = http.MethodPost, c.URLs[n%uint64(len(c.URLs))]+"/v1/orders"
		t.Body = bodies[splitmix(c.Seed+n)%uint64(len(bodies))]
		t.Header = http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {c.KeyPrefix + "-" + strconv.FormatUint(n, 10)}}
		return nil
	}
}

// splitmix is SplitMix64's finaliser: a well-mixed hash of n.
func splitmix(n uint64) uint64 {
	n += 0x9e3779b97f4a7c15
	n = (n ^ (n >> 30)) * 0xbf58476d1ce4e5b9
	n = (n ^ (n >> 27)) * 0x94d049bb133111eb
	return n ^ (n >> 31)
}

// attack is one vegeta attack of d, and the latencies of its 201s; the
// context stops it early.
func attack(ctx context.Context, hc *http.Client, c Config, tr vegeta.Targeter, d time.Duration, name string) (*vegeta.Metrics, *tally.Latency, error) {
	w := uint64(c.Workers)
	a := vegeta.NewAttacker(vegeta.Client(hc), vegeta.Workers(w), vegeta.MaxWorkers(w))
	stop := context.AfterFunc(ctx, func() { a.Stop() })
	defer stop()
	var m vegeta.Metrics
	created := tally.NewLatency()
	for r := range a.Attack(tr, vegeta.Rate{Freq: 0}, d, name) {
		m.Add(r)
		if r.Code == http.StatusCreated {
			created.Record(r.Latency)
		}
	}
	m.Close()
	if err := ctx.Err(); err != nil {
		return &m, created, fmt.Errorf("judge: %s interrupted: %w", name, err)
	}
	return &m, created, nil
}

// summarize condenses vegeta's metrics of the window and its 201s'
// latencies. Its duration runs from the first request to the last answer,
// so the tail is counted.
func summarize(m *vegeta.Metrics, created *tally.Latency) Result {
	d := m.Duration + m.Wait
	r := Result{DurationS: tally.Round(d.Seconds(), 3), Requests: m.Requests, Created: int64(m.StatusCodes["201"]),
		Status: m.StatusCodes, Unsettled: unsettled(m.StatusCodes), CreatedLatencyMs: created.Summary()}
	if d > 0 {
		r.OrdersPerS = tally.Round(float64(r.Created)/d.Seconds(), 1)
	}
	ms := func(q time.Duration) float64 { return tally.Round(float64(q.Microseconds())/1000, 2) }
	l := m.Latencies
	r.LatencyMs = tally.LatencySummary{Count: int64(m.Requests), Mean: ms(l.Mean), P50: ms(l.P50), P90: ms(l.P90), P95: ms(l.P95),
		P99: ms(l.P99), Max: ms(l.Max)}
	errs := append([]string(nil), m.Errors...)
	sort.Strings(errs)
	r.Errors = errs[:min(len(errs), maxErrors)]
	return r
}

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
	"slices"
	"sort"
	"strconv"
	"strings"
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
	// TurnsPerS is each measured turn's 201s per second of the turn, when
	// the window was taken in turns (Interleave): how much the machine
	// moved within it.
	TurnsPerS []float64 `json:"turns_per_s,omitempty"`
	// LatencyMs is every answer's latency, vegeta's own figure;
	// CreatedLatencyMs the 201s' alone, which the latency targets judge: a
	// fast 503 is no order served.
	LatencyMs        VegetaLatency        `json:"latency_ms"`
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
	// BySKU is each SKU's answers, in Config.SKUs' order, warm-up and
	// window together: what the read back checks each SKU against. Not in
	// the JSON: a thousand SKUs' worth in every spread window.
	BySKU []SKUAnswers `json:"-"`
}

// VegetaLatency is vegeta's summary of every answer's latency, in
// milliseconds. Vegeta computes no p99.9, so, unlike tally.LatencySummary,
// it has none: a 0 there would read as a measured figure.
type VegetaLatency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// SKUAnswers are one SKU's answers that may have left units in the store:
// its 201s, one unit each, and its unsettled answers, none or one each.
type SKUAnswers struct {
	Created   int64
	Unsettled int64
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
	sd, err := NewSide(c)
	if err != nil {
		return Result{}, err
	}
	defer sd.Close()
	err = Turns(ctx, []Turner{sd}, Schedule{Warmup: c.Warmup, Window: c.Window, Turns: 1, OnTurn: func(_ int, begin bool) {
		if c.OnWindow != nil {
			c.OnWindow(begin)
		}
	}})
	if err != nil {
		return sd.Answered(), err
	}
	return sd.Result(), nil
}

// A Turner is one side of Turns: a load it can start, measure and stop.
type Turner interface {
	// Run puts the side's load on for d, measured or not (a warm-up, a
	// settle).
	Run(ctx context.Context, d time.Duration, measured bool) error
	// Pause takes the side's load off until its next Run, so that no two
	// sides overlap.
	Pause(ctx context.Context) error
}

// Schedule is how Turns alternates its sides.
type Schedule struct {
	// Warmup is each side's, once, before the first turn.
	Warmup time.Duration
	// Window is each side's measured time, split into Turns turns.
	Window time.Duration
	Turns  int
	// Settle starts each turn, unmeasured, when there are several sides:
	// long enough for the load to refill the system under test (a few of
	// the service's batches) after the other side's turn.
	Settle time.Duration
	// OnTurn, if set, is called just before each measured turn of side i
	// starts (begin true) and just after it ends: where the caller reads
	// the CPU counters.
	OnTurn func(i int, begin bool)
}

// Turns measures several loads under the same conditions. Each side warms
// up once; then the sides take turns, each turn a settle and Window/Turns
// measured, the order of the sides reversed every other turn so that a
// drift in the machine's speed weighs on every side alike. On the shared
// 2-core machine a limit measured half a minute before or after the
// service may meet a different machine: the HTTP floor ran at 14,400–24,400
// orders/s in runs of one binary minutes apart, and at 15,900–22,800
// between the 2 s turns of one window (loadtest/BENCH.md, twenty-eighth
// and twenty-ninth sessions). With one side and one turn it is a warm-up
// and a window.
func Turns(ctx context.Context, sides []Turner, s Schedule) error {
	switch {
	case len(sides) == 0 || s.Turns < 1 || s.Window <= 0 || s.Warmup < 0 || s.Settle < 0:
		return fmt.Errorf("judge: %d sides, %d turns, window %v, warm-up %v, settle %v: want a side, a turn and a window", len(sides), s.Turns, s.Window, s.Warmup, s.Settle)
	case len(sides) > 1 && s.Window/time.Duration(s.Turns) < 4*s.Settle:
		return fmt.Errorf("judge: a window of %v in %d turns: a turn below 4 settles of %v", s.Window, s.Turns, s.Settle)
	}
	pause := func(sd Turner) error {
		if len(sides) == 1 {
			return nil
		}
		return sd.Pause(ctx)
	}
	for _, sd := range sides {
		if s.Warmup > 0 {
			if err := sd.Run(ctx, s.Warmup, false); err != nil {
				return err
			}
		}
		if err := pause(sd); err != nil {
			return err
		}
	}
	order := make([]int, len(sides))
	for i := range order {
		order[i] = i
	}
	for turn := range s.Turns {
		if turn > 0 {
			slices.Reverse(order)
		}
		for _, i := range order {
			sd := sides[i]
			if len(sides) > 1 && s.Settle > 0 {
				if err := sd.Run(ctx, s.Settle, false); err != nil {
					return err
				}
			}
			// The last turn takes what the division left.
			d := s.Window / time.Duration(s.Turns)
			if turn == s.Turns-1 {
				d = s.Window - d*time.Duration(s.Turns-1)
			}
			if s.OnTurn != nil {
				s.OnTurn(i, true)
			}
			err := sd.Run(ctx, d, true)
			if s.OnTurn != nil {
				s.OnTurn(i, false)
			}
			if err == nil {
				err = pause(sd)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Side is one vegeta attack that can take turns (Turns): its own HTTP
// client, kept across its turns so that each starts on warm connections,
// and its own sequence of orders. c.Warmup, c.Window and c.OnWindow are
// Attack's; Turns has its own.
type Side struct {
	c            Config
	hc           *http.Client
	tr           vegeta.Targeter
	warm, window *tallied
}

// NewSide prepares the attack c.
func NewSide(c Config) (*Side, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	bodies := make([][]byte, len(c.SKUs))
	for i, s := range c.SKUs {
		b, err := json.Marshal(order{Lines: []orderLine{{SKU: s, Quantity: 1}}, HoldSeconds: c.HoldSeconds})
		if err != nil {
			return nil, fmt.Errorf("judge: %w", err)
		}
		bodies[i] = b
	}
	hc := &http.Client{Timeout: c.RequestTimeout, Transport: &http.Transport{
		MaxIdleConnsPerHost: c.Workers, MaxIdleConns: c.Workers * len(c.URLs), IdleConnTimeout: time.Minute}}
	n := len(c.SKUs)
	return &Side{c: c, hc: hc, tr: targeter(c, bodies, new(atomic.Uint64)), warm: newTallied(n), window: newTallied(n)}, nil
}

// Run attacks for d, into the window when measured, else with the warm-up.
func (sd *Side) Run(ctx context.Context, d time.Duration, measured bool) error {
	if measured {
		return sd.attack(ctx, d, "window", sd.window)
	}
	return sd.attack(ctx, d, "warmup", sd.warm)
}

// Pause does nothing: an attack ends with its last answer.
func (*Side) Pause(context.Context) error { return nil }

// Result is the measured turns', with the unmeasured ones' 201s and
// unsettled answers as the warm-up's: units the store holds beyond the
// window's.
func (sd *Side) Result() Result {
	r := sd.window.summarize()
	r.WarmupCreated, r.WarmupUnsettled = sd.warm.settled()
	r.BySKU = sd.bySKU()
	return r
}

// Answered is, after an attack that failed part way, what its answers so
// far say the store holds: Result's counts (the turns measured so far as
// the window) and no rate or latency, which a cut window would not give.
func (sd *Side) Answered() Result {
	var r Result
	r.Created, r.Unsettled = sd.window.settled()
	r.WarmupCreated, r.WarmupUnsettled = sd.warm.settled()
	r.BySKU = sd.bySKU()
	return r
}

// bySKU adds up the warm-up's and the window's answers by SKU.
func (sd *Side) bySKU() []SKUAnswers {
	out := slices.Clone(sd.warm.bySKU)
	for i, a := range sd.window.bySKU {
		out[i].Created += a.Created
		out[i].Unsettled += a.Unsettled
	}
	return out
}

// Close closes the side's idle connections.
func (sd *Side) Close() { sd.hc.CloseIdleConnections() }

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
// concurrent calls without a lock. The URL's fragment is the SKU's index
// (skuIndex).
func targeter(c Config, bodies [][]byte, seq *atomic.Uint64) vegeta.Targeter {
	urls := make([][]string, len(c.URLs))
	for i, u := range c.URLs {
		for k := range bodies {
			urls[i] = append(urls[i], u+"/v1/orders#"+strconv.Itoa(k))
		}
	}
	return func(t *vegeta.Target) error {
		n := seq.Add(1) - 1
		k := splitmix(c.Seed+n) % uint64(len(bodies))
		t.Method, t.URL, t.Body = http.MethodPost, urls[n%uint64(len(urls))][k], bodies[k]
		t.Header = http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {c.KeyPrefix + "-" + strconv.FormatUint(n, 10)}}
		return nil
	}
}

// skuIndex is the index of the SKU an answer's order was for, from the
// fragment of its URL: vegeta's Result keeps the target's URL, but its Seq
// is taken before the targeter runs, so it is not the targeter's n. The
// fragment is never sent: a request line carries none.
func skuIndex(url string) (int, bool) {
	i := strings.LastIndexByte(url, '#')
	if i < 0 {
		return 0, false
	}
	k, err := strconv.Atoi(url[i+1:])
	return k, err == nil
}

// splitmix is SplitMix64's finaliser: a well-mixed hash of n.
func splitmix(n uint64) uint64 {
	n += 0x9e3779b97f4a7c15
	n = (n ^ (n >> 30)) * 0xbf58476d1ce4e5b9
	n = (n ^ (n >> 27)) * 0x94d049bb133111eb
	return n ^ (n >> 31)
}

// tallied adds up the answers of one or more attacks: vegeta's metrics,
// the latencies of the 201s, the answers by SKU, and the attacks' measured
// time, each attack from its first request to its last answer.
type tallied struct {
	m       vegeta.Metrics
	created *tally.Latency
	bySKU   []SKUAnswers
	span    time.Duration
	// turns is each attack's 201s per second of its span.
	turns []float64
	// before is the 201s counted before the attack in progress.
	before int
	// first and last bound the attack in progress: its first request and
	// its last answer.
	first, last time.Time
}

// newTallied counts the answers on skus SKUs.
func newTallied(skus int) *tallied {
	return &tallied{created: tally.NewLatency(), bySKU: make([]SKUAnswers, skus)}
}

// add counts r. An answer whose SKU is not known (not the targeter's)
// counts in all but in no SKU's: the read back sees the two disagree.
func (t *tallied) add(r *vegeta.Result) {
	t.m.Add(r)
	k, ok := skuIndex(r.URL)
	ok = ok && k >= 0 && k < len(t.bySKU)
	switch {
	case r.Code == http.StatusCreated:
		t.created.Record(r.Latency)
		if ok {
			t.bySKU[k].Created++
		}
	case ok && (r.Code == 0 || r.Code >= 500):
		t.bySKU[k].Unsettled++
	}
	if t.first.IsZero() || r.Timestamp.Before(t.first) {
		t.first = r.Timestamp
	}
	if end := r.Timestamp.Add(r.Latency); end.After(t.last) {
		t.last = end
	}
}

// end closes the attack in progress: its span joins the measured time.
func (t *tallied) end() {
	d := t.last.Sub(t.first)
	t.span += d
	if n := t.m.StatusCodes["201"]; d > 0 {
		t.turns = append(t.turns, tally.Round(float64(n-t.before)/d.Seconds(), 1))
	}
	t.before = t.m.StatusCodes["201"]
	t.first, t.last = time.Time{}, time.Time{}
}

// settled is the 201s and the unsettled answers counted so far.
func (t *tallied) settled() (created, unsettledN int64) {
	return int64(t.m.StatusCodes["201"]), unsettled(t.m.StatusCodes)
}

// attack is one vegeta attack of d by sd's workers, counted into t; the
// context stops it early.
func (sd *Side) attack(ctx context.Context, d time.Duration, name string, t *tallied) error {
	w := uint64(sd.c.Workers)
	a := vegeta.NewAttacker(vegeta.Client(sd.hc), vegeta.Workers(w), vegeta.MaxWorkers(w))
	stop := context.AfterFunc(ctx, func() { a.Stop() })
	defer stop()
	for r := range a.Attack(sd.tr, vegeta.Rate{Freq: 0}, d, name) {
		t.add(r)
	}
	t.end()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("judge: %s interrupted: %w", name, err)
	}
	return nil
}

// summarize condenses the measured answers. Its time is the attacks'
// spans, so each attack's tail is counted and the gaps between turns are
// not.
func (t *tallied) summarize() Result {
	m := &t.m
	m.Close()
	d := t.span
	r := Result{DurationS: tally.Round(d.Seconds(), 3), Requests: m.Requests, Created: int64(m.StatusCodes["201"]),
		Status: m.StatusCodes, Unsettled: unsettled(m.StatusCodes), CreatedLatencyMs: t.created.Summary()}
	if d > 0 {
		r.OrdersPerS = tally.Round(float64(r.Created)/d.Seconds(), 1)
	}
	ms := func(q time.Duration) float64 { return tally.Round(float64(q.Microseconds())/1000, 2) }
	l := m.Latencies
	r.LatencyMs = VegetaLatency{Count: int64(m.Requests), Mean: ms(l.Mean), P50: ms(l.P50), P90: ms(l.P90), P95: ms(l.P95),
		P99: ms(l.P99), Max: ms(l.Max)}
	errs := append([]string(nil), m.Errors...)
	sort.Strings(errs)
	r.Errors = errs[:min(len(errs), maxErrors)]
	if len(t.turns) > 1 {
		r.TurnsPerS = t.turns
	}
	return r
}

// Package run is the workload runner of `stockguard load run`: it generates
// a seeded workload, creates fresh SKUs on instances that are already up,
// sends the orders over HTTP in a closed or open loop, reconciles answers it
// never heard, and verifies the outcome from three sources: the client's
// receipts (every 201 it got), each SKU's /audit and its counters. It drives
// the service only through its HTTP API and starts nothing; compare, chaos
// and bench start the instances and reuse its receipts and verification.
package run

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/progress"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// attempt is what happened to one generated order.
type attempt struct {
	sent  bool
	first client.Outcome
	retry *client.Outcome
	// final is the answer that settled the order: the first, unless the
	// retry or reconcile settled it otherwise; of Kind unknown if nothing did.
	final client.Outcome
}

// runner holds the state of one Execute.
type runner struct {
	cfg    Config
	client *client.Client
	runID  string
	skus   []string
	orders []Order
	bodies [][]byte
	rc     *Receipts
	lat    *tally.Latency
	res    []attempt
	done   atomic.Int64
}

// ErrInterrupted is Execute's error when ctx ended before the run was
// verified (while it set up, sent, reconciled or verified); the Result it
// returns with it holds what was measured so far, marked INTERRUPTED.
var ErrInterrupted = errors.New("run interrupted")

// Execute creates fresh SKUs on the instances, sends the workload, reconciles
// orders whose outcome it never heard, and verifies the result from the three
// sources. An error means the run could not be carried out or verified;
// damage is reported in the Result, not as an error.
func Execute(ctx context.Context, cfg Config, progressOut io.Writer) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{
		cfg:    cfg,
		client: client.New(cfg.Concurrency+8, cfg.AdminToken, cfg.RequestTimeout),
		runID:  NewRunID(),
		rc:     NewReceipts(),
		lat:    tally.NewLatency(),
	}
	defer r.client.Close()
	started := time.Now()
	var elapsed time.Duration
	// interrupted is what was measured so far, for the caller to print;
	// not verified, since the servers' answers can no longer be waited for.
	interrupted := func(during string) (*Result, error) {
		res := r.result(started, elapsed, false, ledgerOnly(r.skus, int64(cfg.Workload.Stock), r.rc))
		res.Verdict = fmt.Sprintf("INTERRUPTED after %d of %d orders, %s: not verified", res.Orders.Sent, r.cfg.orderCount(), during)
		return res, fmt.Errorf("%w: %w", ErrInterrupted, ctx.Err())
	}
	for _, u := range cfg.URLs {
		if err := r.client.Healthy(ctx, u); err != nil {
			if ctx.Err() != nil {
				return interrupted("before the start")
			}
			return nil, fmt.Errorf("instance %s is not up: %w", u, err)
		}
	}
	if err := r.setup(ctx); err != nil {
		if ctx.Err() != nil {
			return interrupted("while creating the SKUs")
		}
		return nil, err
	}
	started = time.Now()
	elapsed, timedOut := r.send(ctx, progressOut)
	if ctx.Err() != nil {
		return interrupted("while sending")
	}
	reconciled, unresolved := r.reconcile(ctx)
	if ctx.Err() != nil {
		return interrupted("while reconciling unanswered orders")
	}
	ver, verifiedFrom, err := r.verify(ctx, started, progressOut)
	if err != nil {
		if ctx.Err() != nil {
			return interrupted("while verifying")
		}
		return nil, err
	}
	res := r.result(started, elapsed, timedOut, ver)
	res.Orders.Reconciled, res.Orders.Unresolved = reconciled, unresolved
	res.VerifyFromURL = verifiedFrom
	return res, nil
}

// NewRunID names a run; it prefixes SKUs and idempotency keys, so it is
// random (not seeded): two runs with one seed never share a SKU.
func NewRunID() string {
	return "lt" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10]
}

// SKUName is the name of SKU i of a run; it fits the service's SKU pattern.
func SKUName(runID string, i int) string { return fmt.Sprintf("%s-s%05d", runID, i) }

// setup prepares the orders and creates the SKUs with PUT.
func (r *runner) setup(ctx context.Context) error {
	if err := r.prepare(); err != nil {
		return err
	}
	return ForEach(ctx, len(r.skus), 16, func(ctx context.Context, i int) error {
		u := r.cfg.URLs[i%len(r.cfg.URLs)]
		if _, err := r.client.PutSKU(ctx, u, r.skus[i], r.cfg.Workload.Stock); err != nil {
			return fmt.Errorf("create SKUs on %s: %w", u, err)
		}
		return nil
	})
}

// prepare generates the orders and encodes every body up front, before
// the sending phase's clock starts; MaxOrders and MaxOrderLines bound what
// that keeps in memory.
func (r *runner) prepare() error {
	w := r.cfg.Workload
	orders, err := w.Generate(r.cfg.orderCount())
	if err != nil {
		return err
	}
	r.orders = orders
	r.res = make([]attempt, len(orders))
	r.skus = make([]string, w.SKUs)
	for i := range r.skus {
		r.skus[i] = SKUName(r.runID, i)
	}
	r.bodies = make([][]byte, len(orders))
	for i, o := range orders {
		b, err := json.Marshal(r.request(o))
		if err != nil {
			return fmt.Errorf("encode order %d: %w", i, err)
		}
		r.bodies[i] = b
	}
	return nil
}

func (r *runner) request(o Order) client.OrderRequest {
	req := client.OrderRequest{HoldSeconds: r.cfg.HoldSeconds, Lines: make([]client.OrderLine, len(o.Lines))}
	for j, l := range o.Lines {
		req.Lines[j] = client.OrderLine{SKU: r.skus[l.SKU], Quantity: l.Quantity}
	}
	return req
}

func (r *runner) key(i int) string { return fmt.Sprintf("%s-o%07d", r.runID, i) }

// send runs the closed or open loop and returns the sending phase's length
// and whether the timeout cut it short.
func (r *runner) send(ctx context.Context, progressOut io.Writer) (time.Duration, bool) {
	dispatch, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	desc := r.cfg.Backend
	if desc == "" {
		desc = "orders"
	}
	bar := progress.Start(ctx, progressOut, r.cfg.Progress, int64(len(r.orders)),
		progress.Options{Desc: desc, Unit: "orders", Width: 30, Rate: true, Count: &r.done})
	start := time.Now()
	if r.cfg.openLoop() {
		r.openLoop(ctx, dispatch, start)
	} else {
		r.closedLoop(ctx, dispatch)
	}
	elapsed := time.Since(start)
	bar.Stop()
	return elapsed, dispatch.Err() != nil && ctx.Err() == nil && int(r.done.Load()) < len(r.orders)
}

// closedLoop runs C clients that each send their next order as soon as the
// previous one is answered; latency is measured from the actual send.
func (r *runner) closedLoop(ctx, dispatch context.Context) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for dispatch.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(r.orders) {
					return
				}
				r.one(ctx, i, time.Now())
			}
		})
	}
	wg.Wait()
}

// openLoop sends order i at start + i/rate, never later than due unless
// Concurrency requests are already in flight; either way latency counts from
// the due time.
func (r *runner) openLoop(ctx, dispatch context.Context, start time.Time) {
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for i := range r.orders {
		due := start.Add(time.Duration(float64(i) * float64(time.Second) / r.cfg.Rate))
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-dispatch.Done():
				break loop
			}
		}
		select {
		case sem <- struct{}{}:
		case <-dispatch.Done():
			break loop
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r.one(ctx, i, due)
		})
	}
	wg.Wait()
}

// one sends order i (and its deliberate retry) and books the answers.
func (r *runner) one(ctx context.Context, i int, from time.Time) {
	key, body := r.key(i), r.bodies[i]
	urls := r.cfg.URLs
	first := r.client.PlaceOrder(ctx, urls[i%len(urls)], key, body)
	r.lat.Record(time.Since(from))
	a := attempt{sent: true, first: first, final: first}
	if first.Kind == client.KindReserved {
		r.rc.Record(key, r.request(r.orders[i]), first.Order)
	}
	if r.orders[i].Retry && ctx.Err() == nil {
		// A retry through a load balancer lands on another instance.
		again := r.client.PlaceOrder(ctx, urls[(i+1)%len(urls)], key, body)
		a.retry = &again
		if again.Kind == client.KindReserved {
			r.rc.Record(key, r.request(r.orders[i]), again.Order)
		}
		// A shed retry (503) says nothing of the first attempt: an order
		// whose first answer was unknown stays unknown, for reconcile.
		if a.final.Kind != client.KindReserved && again.Settled() {
			a.final = again
		}
	}
	r.res[i] = a
	r.done.Add(1)
}

// reconcileWait is the part of reconcile's budget that does not grow with
// the request timeout. The budget outlasts how long an instance may keep a
// key in flight (its lock wait plus its store timeout, 15 s by default);
// a var so that tests can shorten it.
var reconcileWait = 30 * time.Second

// Backoff of reconcile's resends of one order: the first waits
// reconcileFirstBackoff, each next one twice as long, up to
// reconcileMaxBackoff, so that a key in flight for its whole lock wait is
// asked a handful of times, not hammered.
const (
	reconcileFirstBackoff = 100 * time.Millisecond
	reconcileMaxBackoff   = 2 * time.Second
)

// Settle resends the order key names, with its body, to urls in turn from
// urls[start], until an answer settles what became of it
// (client.Outcome.Settled: not no answer, a key still in flight or a 5xx,
// which decide nothing about an earlier attempt still running) or ctx ends
// (ok false). Then out is the last answer of a resend ctx did not cut
// short, or the zero Outcome if there was none. The waits between resends
// double from reconcileFirstBackoff.
func Settle(ctx context.Context, c *client.Client, urls []string, start int, key string, body []byte) (out client.Outcome, ok bool) {
	backoff := reconcileFirstBackoff
	for try := 0; ctx.Err() == nil; try++ {
		o := c.PlaceOrder(ctx, urls[(start+try)%len(urls)], key, body)
		if o.Settled() {
			return o, true
		}
		if ctx.Err() == nil {
			out = o
		}
		Sleep(ctx, backoff)
		backoff = min(2*backoff, reconcileMaxBackoff)
	}
	return out, false
}

// reconcile resends, with the same key and body, every order whose outcome
// is unknown (no answer, the key still in flight, a 5xx that may follow a
// commit, or a retry shed with a 503), as a client must before it can
// account for its orders, until an answer settles it or the budget ends.
// Parallelism and time are bounded; the orders left unknown are marked in
// the receipts, for the verification to allow for their units.
func (r *runner) reconcile(ctx context.Context) (reconciled, unresolved int) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.reconcileBudget())
	defer cancel()
	var todo []int
	for i, a := range r.res {
		if a.sent && a.final.Kind == client.KindUnknown {
			todo = append(todo, i)
		}
	}
	_ = ForEach(ctx, len(todo), min(r.cfg.Concurrency, 16), func(ctx context.Context, j int) error {
		i := todo[j]
		out, ok := Settle(ctx, r.client, r.cfg.URLs, i, r.key(i), r.bodies[i])
		if !ok {
			// Still unknown, it is counted by its last answer's code; a
			// stale_fence or a 503 overloaded settles no more than no
			// answer does. Every answer names a code; the zero Outcome
			// is no answer at all.
			if out.Code != "" {
				r.res[i].final = client.Outcome{Kind: client.KindUnknown, Status: out.Status, Code: out.Code, Err: out.Err}
			}
			return nil
		}
		if out.Kind == client.KindReserved {
			r.rc.Record(r.key(i), r.request(r.orders[i]), out.Order)
		}
		r.res[i].final = out
		return nil
	})
	for _, i := range todo {
		if r.res[i].final.Kind == client.KindUnknown {
			r.rc.MarkUnresolved(r.key(i), r.request(r.orders[i]))
			unresolved++
		} else {
			reconciled++
		}
	}
	return reconciled, unresolved
}

// verify reads every SKU's audit and counters and checks them against the
// receipts; with --fencing=off the rows carry no token to check. The
// instances share one store, so it reads through the first that answers
// them all: one that died during the run must not leave it unverified. It
// returns the URL it read through, and notes on progressOut each one that
// failed. Every read must end before a hold could expire
// (Config.holdsSafeUntil; holdsFrom is when the first order was sent, no
// later than any hold began): an attempt still reading then fails, and
// the next instance is tried only while verifyReads, what Validate sized
// the holds to leave the reads, is left. A run it cannot verify in time is
// "not verified", never given a verdict on expired holds.
func (r *runner) verify(ctx context.Context, holdsFrom time.Time, progressOut io.Writer) (Verification, string, error) {
	safeUntil := r.cfg.holdsSafeUntil(holdsFrom)
	inTime, cancel := context.WithDeadline(ctx, safeUntil)
	defer cancel()
	urls := r.cfg.URLs
	var errs []error
	for i, u := range urls {
		if left := time.Until(safeUntil); i > 0 && left < verifyReads {
			return Verification{}, "", fmt.Errorf("not verified: the holds could expire in %v (--hold-seconds=%d from the first order, less %v for the instances' clocks), "+
				"less than the %v allowed for reading every SKU through %s: %w",
				max(left, 0).Round(100*time.Millisecond), r.cfg.HoldSeconds, holdClockMargin, verifyReads, u, errors.Join(errs...))
		}
		v, err := Verify(inTime, r.client, u, r.skus, int64(r.cfg.Workload.Stock), r.rc, r.cfg.Fencing != "off")
		if err == nil {
			return v, u, nil
		}
		if ctx.Err() != nil {
			return Verification{}, "", err
		}
		errs = append(errs, fmt.Errorf("through %s: %w", u, err))
		if inTime.Err() != nil {
			return Verification{}, "", fmt.Errorf("not verified: the holds could expire (--hold-seconds=%d from the first order, less %v for the instances' clocks) before the verification read every SKU: %w",
				r.cfg.HoldSeconds, holdClockMargin, errors.Join(errs...))
		}
		if progressOut != nil && i+1 < len(urls) {
			fmt.Fprintf(progressOut, "%s did not answer the verification (%v): verifying through %s\n", u, err, urls[i+1])
		}
	}
	return Verification{}, "", fmt.Errorf("no instance answered the verification: %w", errors.Join(errs...))
}

// result tallies the attempts into a Result.
func (r *runner) result(started time.Time, elapsed time.Duration, timedOut bool, v Verification) *Result {
	cfg := r.cfg
	res := &Result{
		Label: cfg.Label, Backend: cfg.Backend, Fencing: cfg.Fencing,
		Instances: len(cfg.URLs), URLs: cfg.URLs, RunID: r.runID, Seed: cfg.Workload.Seed,
		StartedAt: started.UTC(), DurationS: tally.Round(elapsed.Seconds(), 3), TimedOut: timedOut,
		Workload: WorkloadInfo{
			Mode: "closed", Orders: len(r.orders), Concurrency: cfg.Concurrency,
			SKUs: cfg.Workload.SKUs, Stock: cfg.Workload.Stock, Lines: cfg.Workload.Lines, Qty: cfg.Workload.Qty,
			Zipf: cfg.Workload.Zipf, RetryShare: cfg.Workload.RetryShare, HoldSeconds: cfg.HoldSeconds,
		},
		Orders:          tally.OrderCounts{ErrorCodes: map[string]int{}, FirstAnswers: &tally.AnswerCounts{ErrorCodes: map[string]int{}}},
		LatencyMs:       r.lat.Summary(),
		LatencyCurve:    r.lat.Curve(),
		LatencyFrom:     "send",
		Verification:    v,
		ExpectedUnsafe:  cfg.ExpectedUnsafe,
		VerifyFromURL:   cfg.URLs[0],
		GeneratorOrders: len(r.orders),
	}
	if cfg.openLoop() {
		res.Workload.Mode, res.LatencyFrom = "open", "intended_send"
		res.Workload.RatePerS, res.Workload.Duration = cfg.Rate, cfg.Duration.String()
	}
	o := &res.Orders
	reservedWhileSending := 0
	for i, a := range r.res {
		if !a.sent {
			o.Unsent++
			continue
		}
		o.Add(a.final.Kind, a.final.Code)
		o.FirstAnswers.Add(a.first.Kind, a.first.Code)
		if a.first.Kind == client.KindReserved || a.retry != nil && a.retry.Kind == client.KindReserved {
			reservedWhileSending++
		}
		if a.retry == nil {
			continue
		}
		o.Retries++
		switch classifyRetry(a.first, *a.retry) {
		case retryReplayed:
			o.RetryReplayed++
		case retrySettled:
			o.RetrySettled++
		case retryUnsettled:
			o.RetryUnsettled++
		case retryMismatch:
			o.RetryMismatch++
			// Two 201s with two order ids for one key are the receipts'
			// idempotency_violated already: one fault, one finding.
			if a.first.Kind != client.KindReserved || a.retry.Kind != client.KindReserved {
				res.Verification.note(Disagreement{
					SKU: r.skus[r.orders[i].Lines[0].SKU], Kind: "retry_not_replayed",
					Detail: fmt.Sprintf("key %s: first answer %s, same-key retry %s", r.key(i), answerText(a.first), answerText(*a.retry)),
				})
			}
		}
	}
	res.Units = tally.UnitCounts{
		Stock:    int64(cfg.Workload.Stock) * int64(cfg.Workload.SKUs),
		Reserved: v.Sources.Ledger.Units,
		Oversold: v.Oversold,
		Lost:     v.Lost,
		// Interrupted before the verification: nothing was read back to
		// count oversold or lost units by.
		Unverified: v.Unverified,
	}
	if s := elapsed.Seconds(); s > 0 {
		res.ThroughputPerS = tally.Round(float64(o.Sent)/s, 3)
		// Orders.Reserved also holds the orders reconcile found placed
		// after sending ended, outside the time divided by.
		res.ReservedPerS = tally.Round(float64(reservedWhileSending)/s, 3)
	}
	res.Safe = res.Verification.Safe()
	res.Verdict = VerdictText(res.Verification)
	return res
}

// retryClass is what a deliberate same-key retry's answer says of the
// order's first answer.
type retryClass int

const (
	retryReplayed  retryClass = iota // the first answer again
	retryMismatch                    // contradicts a definite first answer
	retryUnsettled                   // settles nothing
	retrySettled                     // decides an order the first answer left open
)

// classifyRetry sorts a retry by its answer and the first. Every class is
// counted, so that the retry figures add up to the retries.
func classifyRetry(first, retry client.Outcome) retryClass {
	placed := first.Kind == client.KindReserved
	switch {
	case placed && retry.Kind == client.KindReserved && retry.Order.OrderID == first.Order.OrderID:
		return retryReplayed
	case placed && retry.Answered():
		// Another order id, or a refusal of an order already placed (a
		// stale_fence too: the service replays a placed order's key).
		return retryMismatch
	case !retry.Settled():
		// Shed, unanswered, a 5xx, or overtaken: no evidence either way.
		return retryUnsettled
	case !first.Settled():
		// No answer, the key in flight, a 5xx or a stale_fence decided
		// nothing; the retry's answer is the order's outcome.
		return retrySettled
	case retry.Kind == first.Kind && retry.Code == first.Code:
		return retryReplayed
	default:
		// Two definite answers that differ. A run's stock never grows
		// (no cancels, holds that outlast it), so an insufficient_stock
		// that a retry turns into a 201 was a wrong answer, one way or
		// the other.
		return retryMismatch
	}
}

// answerText names an answer in a disagreement's detail.
func answerText(o client.Outcome) string {
	if o.Kind == client.KindReserved {
		return "201 " + o.Order.OrderID
	}
	return fmt.Sprintf("%s (HTTP %d)", cmp.Or(o.Code, o.Kind.String()), o.Status)
}

// ForEach calls fn for 0..n-1 with at most par calls at once and returns the
// first error, cancelling the rest.
func ForEach(ctx context.Context, n, par int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/history"
	"github.com/stockguard/stockguard/loadtest/run"
)

// Bounds of one recorded operation's retries: a client resends with its
// Idempotency-Key until an answer settles the operation, as the API asks
// of it, but not forever.
const (
	histAttempts   = 12
	histRetryLimit = 45 * time.Second
	// histBackoffCap caps the wait Retry-After asks for between attempts.
	histBackoffCap = time.Second
	// histHold is the hold of every recorded order: longer than any run, and
	// the reaper is off, so holds outlive the run (the checker would model
	// an expiry, but none happens).
	histHold = 900
)

// histExpiry says, in the report, how the checker treats expiry.
const histExpiry = "holds outlive the run (hold_seconds 900, reaper off): no order expires; the checker models expiry but sees none"

// histRecorder is a set of clients whose every request and answer goes into
// a history for the checker: orders on SKUs of their own (the steady load
// never touches them, so the final read sees only recorded operations),
// confirms and cancels of their own orders, each operation retried with
// its key until an answer settles it.
type histRecorder struct {
	h      history.History
	client *client.Client
	urls   []string
	skus   []string
	stock  int
	runID  string

	seq     atomic.Int64
	retries atomic.Int64
	// Answers worth a figure: 503 store_unavailable, 503s without
	// Retry-After, 500s (never acceptable).
	storeUnavailable atomic.Int64
	noRetryAfter     atomic.Int64
	internal         atomic.Int64

	stopFn  context.CancelFunc
	workers sync.WaitGroup
	extra   sync.WaitGroup
}

// newHistRecorder makes nSKUs SKUs of its own with stock units each,
// through the first instance.
func (e *chaosEnv) newHistRecorder(ctx context.Context, nSKUs, stock int) (*histRecorder, error) {
	urls := e.urls()
	r := &histRecorder{urls: urls, stock: stock, runID: e.load.runID,
		client: e.newClient(32, "", e.cc.RequestTimeout, func(rt http.RoundTripper) http.RoundTripper { return chaosTransport{base: rt} })}
	for i := range nSKUs {
		sku := fmt.Sprintf("%s-h%02d", e.load.runID, i)
		if _, err := e.client.PutSKU(ctx, urls[0], sku, stock); err != nil {
			return nil, err
		}
		r.skus = append(r.skus, sku)
	}
	e.hist = r
	return r, nil
}

// run starts n clients, client w pinned to instance w mod instances, that
// place, confirm and cancel until stop.
func (r *histRecorder) run(ctx context.Context, n int, seed uint64) {
	stopCtx, stop := context.WithCancel(ctx)
	r.stopFn = stop
	for w := range n {
		r.workers.Go(func() {
			rng := rand.New(rand.NewPCG(seed, 1<<32+uint64(w)))
			var mine []string // this client's orders still reserved, as it believes
			for stopCtx.Err() == nil {
				inst := w % len(r.urls)
				switch x := rng.IntN(10); {
				case x < 2 && len(mine) > 0:
					i := rng.IntN(len(mine))
					kind := history.Confirm
					if x == 1 {
						kind = history.Cancel
					}
					r.transition(ctx, w, inst, kind, mine[i])
					mine = append(mine[:i], mine[i+1:]...)
				default:
					if out := r.place(ctx, w, inst, r.randomLines(rng), 0); out.Result == history.OK {
						mine = append(mine, out.OrderID)
					}
				}
			}
		})
	}
}

// stop ends the clients and waits for every operation in flight.
func (r *histRecorder) stop() {
	if r.stopFn != nil {
		r.stopFn()
	}
	r.workers.Wait()
	r.extra.Wait()
}

func (r *histRecorder) randomLines(rng *rand.Rand) []history.Line {
	first := rng.IntN(len(r.skus))
	lines := []history.Line{{SKU: r.skus[first], Quantity: int64(1 + rng.IntN(3))}}
	if len(r.skus) > 1 && rng.IntN(4) == 0 {
		second := (first + 1 + rng.IntN(len(r.skus)-1)) % len(r.skus)
		lines = append(lines, history.Line{SKU: r.skus[second], Quantity: int64(1 + rng.IntN(3))})
	}
	return lines
}

// placePaused sends, without waiting, one recorded order of qty units of
// sku to instance inst that stalls for pause between its claim and its
// write, as client id c; answered gets its outcome.
func (r *histRecorder) placePaused(ctx context.Context, c, inst int, sku string, qty int64, pause time.Duration, answered func(history.Outcome, time.Duration)) {
	r.extra.Go(func() {
		start := time.Now()
		out := r.place(ctx, c, inst, []history.Line{{SKU: sku, Quantity: qty}}, pause)
		answered(out, time.Since(start))
	})
}

// place records one order and its retries as one operation.
func (r *histRecorder) place(ctx context.Context, c, inst int, lines []history.Line, pause time.Duration) history.Outcome {
	req := client.OrderRequest{HoldSeconds: histHold}
	for _, l := range lines {
		req.Lines = append(req.Lines, client.OrderLine{SKU: l.SKU, Quantity: int(l.Quantity)})
	}
	body, err := json.Marshal(req)
	if err != nil {
		panic(err) // plain structs always encode
	}
	key := fmt.Sprintf("%s-k%07d", r.runID, r.seq.Add(1))
	id := r.h.Invoke(history.Op{Client: c, Kind: history.Place, Key: key, Lines: lines})
	out, settled := r.attempts(ctx, inst, history.Place, 0, func(ctx context.Context, url string, attempt int) client.Outcome {
		if attempt == 0 && pause > 0 {
			ctx = withChaosPause(ctx, pause)
		}
		return r.client.PlaceOrder(ctx, url, key, body)
	})
	res := r.placeOutcome(out, settled, lines)
	r.h.Complete(id, res)
	return res
}

// placeOutcome is outcome for a place of lines: an acknowledgement keeps
// the lines the service answered, with their fence tokens (the tokens
// rule compares them), and a refusal for stock names the SKU when only one
// can be meant.
func (r *histRecorder) placeOutcome(out client.Outcome, settled bool, lines []history.Line) history.Outcome {
	res := r.outcome(out, settled)
	if res.Result == history.OK {
		for _, l := range out.Order.Lines {
			res.Lines = append(res.Lines, history.Line{SKU: l.SKU, Quantity: int64(l.Quantity), Token: l.FenceToken})
		}
	}
	if res.Code == history.CodeInsufficientStock && len(lines) == 1 {
		res.SKU = lines[0].SKU
	}
	return res
}

// transition records a confirm or cancel of order and its retries.
func (r *histRecorder) transition(ctx context.Context, c, inst int, kind history.Kind, order string) history.Outcome {
	id := r.h.Invoke(history.Op{Client: c, Kind: kind, OrderID: order})
	out, settled := r.attempts(ctx, inst, kind, 0, func(ctx context.Context, url string, _ int) client.Outcome {
		if kind == history.Confirm {
			return r.client.ConfirmOrder(ctx, url, order)
		}
		return r.client.CancelOrder(ctx, url, order)
	})
	res := r.outcome(out, settled)
	r.h.Complete(id, res)
	return res
}

// attempts sends an operation of kind until an answer settles it, the next
// attempt to the next instance (a client behind a load balancer), waiting
// as Retry-After asks; sent is how many attempts went out before (a probe's
// own first one). It returns the last answer and whether it settled the
// operation: when the attempts or the time run out first it did not.
func (r *histRecorder) attempts(ctx context.Context, inst int, kind history.Kind, sent int,
	send func(ctx context.Context, url string, attempt int) client.Outcome) (client.Outcome, bool) {
	deadline := time.Now().Add(histRetryLimit)
	var out client.Outcome
	for attempt := 0; attempt < histAttempts; attempt++ {
		if attempt > 0 {
			r.retries.Add(1)
		}
		out = send(ctx, r.urls[(inst+attempt)%len(r.urls)], attempt)
		r.note(out)
		if settles(kind, out, sent+attempt == 0) {
			return out, true
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		run.Sleep(ctx, backoff(out))
	}
	return out, false
}

func (r *histRecorder) note(out client.Outcome) {
	switch {
	case out.Status == 500:
		r.internal.Add(1)
	case out.Status == 503 && out.RetryAfter == "":
		r.noRetryAfter.Add(1)
	}
	if out.Status == 503 && out.Code == "store_unavailable" {
		r.storeUnavailable.Add(1)
	}
}

// settles reports whether an answer settles an operation of kind, given
// whether it answers the operation's first attempt: a success, or a
// refusal that says nothing happened. 503s (lock, store, overload, deadline)
// and 500s ask for a retry; a lock_unavailable may be a lease lost around
// the write. After an attempt that went unanswered (it may still commit),
// only an answer that settles what became of every attempt will do
// (client.Outcome.Settled): a 409 stale_fence may be the earlier attempt
// overtaking this one, and an insufficient_stock says nothing of an earlier
// attempt still waiting for stock, which the recorded clients' cancels
// return.
func settles(kind history.Kind, out client.Outcome, first bool) bool {
	switch {
	case first:
		return out.Answered()
	case kind == history.Place && out.Kind == client.KindInsufficient:
		return false
	}
	return out.Settled()
}

// backoff is the Retry-After of the answer, capped, or a short pause.
func backoff(out client.Outcome) time.Duration {
	if s, err := strconv.Atoi(out.RetryAfter); err == nil && s > 0 {
		return min(time.Duration(s)*time.Second, histBackoffCap)
	}
	return 200 * time.Millisecond
}

// outcome classifies the last answer for the history: only a success or a
// refusal that settled the operation is known; anything else may or may
// not have happened.
func (r *histRecorder) outcome(out client.Outcome, settled bool) history.Outcome {
	switch {
	case out.Kind == client.KindReserved && out.Order != nil:
		return history.Outcome{Result: history.OK, OrderID: out.Order.OrderID}
	case settled:
		return history.Outcome{Result: history.Failed, Code: out.Code}
	}
	return history.Outcome{Result: history.Unknown, Code: out.Code}
}

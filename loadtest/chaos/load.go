package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/run"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// maxChaosOrders bounds the orders one chaos run sends, whatever the
// duration: a service that answers instantly (all 503s, say) must not fill
// memory with outcomes.
const maxChaosOrders = 500_000

// chaosOutcome is one answered order, timed from the start of the load.
type chaosOutcome struct {
	sent, done time.Duration
	inst       int
	kind       client.Kind
	code       string
}

// pendingOrder is an order whose outcome is unknown, kept to reconcile.
type pendingOrder struct {
	key  string
	body []byte
	req  client.OrderRequest
	inst int
}

// chaosLoad is the steady order load of a chaos run: closed-loop clients
// pinned to instances, ordering from a few hot SKUs, plus the orders a
// scenario sends on purpose (with X-Chaos-Pause). It books every 201 in a
// receipts, as run does, and keeps every outcome with its time for the
// timeline and the recovery figures.
type chaosLoad struct {
	client   *client.Client
	urls     []string
	skus     []string
	runID    string
	receipts *run.Receipts
	lat      *tally.Latency
	hold     int

	start time.Time
	seq   atomic.Int64
	sent  atomic.Int64

	mu       sync.Mutex
	outcomes []chaosOutcome
	pending  []pendingOrder

	stopLoad context.CancelFunc
	workers  sync.WaitGroup
	extra    sync.WaitGroup // orders sent by the scenario
}

func newChaosLoad(urls, skus []string, runID string, concurrency int, requestTimeout time.Duration) *chaosLoad {
	c := client.New(concurrency+8, "", requestTimeout)
	c.WrapTransport(func(rt http.RoundTripper) http.RoundTripper { return chaosTransport{base: rt} })
	return &chaosLoad{client: c, urls: urls, skus: skus, runID: runID, receipts: run.NewReceipts(), lat: tally.NewLatency(), hold: 900}
}

// since is the time since the load started.
func (l *chaosLoad) since() time.Duration { return time.Since(l.start) }

// run starts concurrency clients, spread evenly over the instances, that
// send orders one after the other until stop. ctx bounds the requests
// themselves: a stopped load lets requests in flight finish.
func (l *chaosLoad) run(ctx context.Context, concurrency int, seed uint64) {
	l.start = time.Now()
	stopCtx, stop := context.WithCancel(ctx)
	l.stopLoad = stop
	for w := range concurrency {
		l.workers.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
			inst := w % len(l.urls)
			for stopCtx.Err() == nil && l.sent.Load() < maxChaosOrders {
				l.place(ctx, inst, l.randomOrder(rng), 0)
			}
		})
	}
}

// stop ends the load and waits for every order in flight, the scenario's
// included.
func (l *chaosLoad) stop() {
	if l.stopLoad != nil {
		l.stopLoad()
	}
	l.workers.Wait()
	l.extra.Wait()
}

// randomOrder is one or, now and then, two lines of 1–3 units: small
// orders, so that many of them contend for the same hot SKUs.
func (l *chaosLoad) randomOrder(rng *rand.Rand) client.OrderRequest {
	req := client.OrderRequest{HoldSeconds: l.hold}
	first := rng.IntN(len(l.skus))
	req.Lines = append(req.Lines, client.OrderLine{SKU: l.skus[first], Quantity: 1 + rng.IntN(3)})
	if len(l.skus) > 1 && rng.IntN(5) == 0 {
		second := (first + 1 + rng.IntN(len(l.skus)-1)) % len(l.skus)
		req.Lines = append(req.Lines, client.OrderLine{SKU: l.skus[second], Quantity: 1 + rng.IntN(3)})
	}
	return req
}

// stalledQty is the size of each stalled order. When its late write lands
// over newer ones, either its own reservation or theirs vanishes from the
// counters: the newer holders often still hold their lease and rewrite the
// row from memory, erasing exactly the stalled order's units. A large order
// makes that damage plain, where a single unit would hide in the noise.
const stalledQty = 25

// sendPaused sends, without waiting, one order per hot SKU to instance inst,
// each asking the instance to stall for pause between its claim and its
// write, and passes each answer to answered. A paused request is decided
// alone, never coalesced, and its lease has no watchdog (unless ctx is
// withWatchdog's).
func (l *chaosLoad) sendPaused(ctx context.Context, inst int, pause time.Duration, answered func(sku string, out client.Outcome, took time.Duration)) {
	for _, sku := range l.skus {
		req := client.OrderRequest{HoldSeconds: l.hold, Lines: []client.OrderLine{{SKU: sku, Quantity: stalledQty}}}
		l.extra.Go(func() {
			start := time.Now()
			out := l.place(ctx, inst, req, pause)
			answered(sku, out, time.Since(start))
		})
	}
}

// place sends one order and books its outcome.
func (l *chaosLoad) place(ctx context.Context, inst int, req client.OrderRequest, pause time.Duration) client.Outcome {
	body, err := json.Marshal(req)
	if err != nil {
		panic(err) // plain structs always encode
	}
	key := fmt.Sprintf("%s-o%07d", l.runID, l.seq.Add(1))
	if pause > 0 {
		ctx = withChaosPause(ctx, pause)
	}
	l.sent.Add(1)
	sent := l.since()
	out := l.client.PlaceOrder(ctx, l.urls[inst], key, body)
	done := l.since()
	l.lat.Record(done - sent)
	if out.Kind == client.KindReserved {
		l.receipts.Record(key, req, out.Order)
	}
	l.mu.Lock()
	l.outcomes = append(l.outcomes, chaosOutcome{sent: sent, done: done, inst: inst, kind: out.Kind, code: out.Code})
	if out.Kind == client.KindUnknown {
		l.pending = append(l.pending, pendingOrder{key: key, body: body, req: req, inst: inst})
	}
	l.mu.Unlock()
	return out
}

// reconcile resends every order whose outcome is unknown with its key and
// body, to the other instances in turn, until an answer settles it
// (run.Settle): the receipts must hold every reservation, or the
// verification would count an order that did go through as a lost update.
// A resend shed with a 503 settles nothing: the first attempt may still be
// running on another instance. Time is bounded; what is left is
// unresolved, and marked so in the receipts.
func (l *chaosLoad) reconcile(ctx context.Context) (reconciled, unresolved int) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	l.mu.Lock()
	todo := append([]pendingOrder(nil), l.pending...)
	l.mu.Unlock()
	results := make([]bool, len(todo))
	_ = run.ForEach(ctx, len(todo), 8, func(ctx context.Context, j int) error {
		p := todo[j]
		out, ok := run.Settle(ctx, l.client, l.urls, p.inst+1, p.key, p.body)
		if !ok {
			return nil
		}
		if out.Kind == client.KindReserved {
			l.receipts.Record(p.key, p.req, out.Order)
		} else {
			l.receipts.Refused(p.key, p.req)
		}
		results[j] = true
		return nil
	})
	for j, ok := range results {
		if ok {
			reconciled++
			continue
		}
		// It may have landed: the verification allows for its units, and
		// a gap they explain makes the verdict inconclusive, not damage.
		l.receipts.MarkUnresolved(todo[j].key, todo[j].req)
		unresolved++
	}
	return reconciled, unresolved
}

// sellOut orders, SKU by SKU, what the counters still call available, until
// they say 0. With the fence the counters are exact and this only empties
// the shelf; without it, units a lost update erased from the counters are
// sold a second time, and the audit shows them as oversold. It returns the
// units sold.
func (l *chaosLoad) sellOut(ctx context.Context) (int64, error) {
	var total int64
	for i, sku := range l.skus {
		for try := 0; try < 8; try++ {
			st, err := l.client.GetSKU(ctx, l.urls[0], sku)
			if err != nil {
				return total, fmt.Errorf("sell out: %w", err)
			}
			if st.Available <= 0 {
				break
			}
			q := min(st.Available, 1_000_000)
			req := client.OrderRequest{HoldSeconds: l.hold, Lines: []client.OrderLine{{SKU: sku, Quantity: int(q)}}}
			body, _ := json.Marshal(req)
			key := fmt.Sprintf("%s-sellout-%d-%d", l.runID, i, try)
			out := l.client.PlaceOrder(ctx, l.urls[0], key, body)
			if out.Kind == client.KindUnknown {
				// Learn the outcome with the same key before reading again.
				out = l.client.PlaceOrder(ctx, l.urls[1%len(l.urls)], key, body)
			}
			if out.Kind == client.KindReserved {
				l.receipts.Record(key, req, out.Order)
				total += q
				continue
			}
			run.Sleep(ctx, 200*time.Millisecond)
		}
	}
	return total, nil
}

// snapshot returns the outcomes so far.
func (l *chaosLoad) snapshot() []chaosOutcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]chaosOutcome(nil), l.outcomes...)
}

// verify reads every SKU's audit and counters and checks them against the
// receipts, exactly as run does.
func (l *chaosLoad) verify(ctx context.Context, stock int, fenced bool) (run.Verification, error) {
	return run.Verify(ctx, l.client, l.urls[0], l.skus, int64(stock), l.receipts, fenced)
}

type (
	chaosPauseKey   struct{}
	chaosWatchedKey struct{}
)

// withChaosPause marks a request context so that chaosTransport sends
// X-Chaos-Pause (or, under withWatchdog, X-Chaos-Stall): PlaceOrder stays
// the one place that classifies answers.
func withChaosPause(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, chaosPauseKey{}, d)
}

// withWatchdog makes the stalls asked under ctx X-Chaos-Stall: the stalled
// batch keeps its lease watchdog, as a process that runs on does, where
// X-Chaos-Pause's lease has none, as a paused process renews nothing.
func withWatchdog(ctx context.Context) context.Context {
	return context.WithValue(ctx, chaosWatchedKey{}, true)
}

// stallHeader is the header a stall asked under ctx is sent with.
func stallHeader(ctx context.Context) string {
	if ctx.Value(chaosWatchedKey{}) != nil {
		return "X-Chaos-Stall"
	}
	return "X-Chaos-Pause"
}

// chaosTransport adds the stall header to requests whose context asks for
// one.
type chaosTransport struct{ base http.RoundTripper }

func (t chaosTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if d, ok := r.Context().Value(chaosPauseKey{}).(time.Duration); ok && d > 0 {
		r = r.Clone(r.Context())
		r.Header.Set(stallHeader(r.Context()), d.String())
	}
	return t.base.RoundTrip(r)
}

// CloseIdleConnections lets Client.Close reach the wrapped transport.
func (t chaosTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

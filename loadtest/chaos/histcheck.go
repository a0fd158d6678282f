package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/loadtest/history"
)

// histCheckTimeout bounds the linearizability check of one run's history;
// a SKU still undecided then fails a fenced run (it proved nothing).
const histCheckTimeout = 20 * time.Second

// HistoryCheck is the history checker's verdict on a run's recorded
// operations, with the answers that matter for a database fault.
type HistoryCheck struct {
	SKUs       []string `json:"skus"`
	Operations int      `json:"operations"`
	OK         int      `json:"ok"`
	Failed     int      `json:"failed"`
	Unknown    int      `json:"unknown"`
	// Retries counts same-key resends after an indefinite answer.
	Retries int64 `json:"retries"`
	// StoreUnavailable counts 503 store_unavailable answers; NoRetryAfter
	// 503s without a Retry-After header; Internal 500s.
	StoreUnavailable int64 `json:"store_unavailable"`
	NoRetryAfter     int64 `json:"no_retry_after"`
	Internal         int64 `json:"internal_errors"`
	// Orders and DoubledKeys are from the final read: orders on the SKUs,
	// and idempotency keys that made more than one order.
	Orders      int                `json:"orders"`
	DoubledKeys int                `json:"doubled_keys"`
	Expiry      string             `json:"expiry"`
	Violations  []HistoryViolation `json:"violations"`
	Undecided   []string           `json:"undecided,omitempty"`
	CheckMs     float64            `json:"check_ms"`
	// LostAcks are lost-commit-ack's probes, nil in other scenarios.
	LostAcks *LostAcks `json:"lost_acks,omitempty"`
	// Report is the checker's text: the first violating sub-history when
	// it found one.
	Report string `json:"report"`
	Error  string `json:"error,omitempty"`
}

// HistoryViolation is one broken rule of the checker.
type HistoryViolation struct {
	SKU     string `json:"sku"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// violated reports whether the checker found a violation; false for a run
// without a history.
func (h *HistoryCheck) violated() bool { return h != nil && len(h.Violations) > 0 }

// fenceFree reports whether a rule of the checker must hold in every
// fencing mode: an acknowledged order exists once, a key makes one order,
// transitions agree with their answers. The unique index on the
// idempotency key and the order's own row decide those, not the lock; only
// the units, linearizability and tokens rules, which a stale write breaks,
// depend on the fence.
func fenceFree(rule string) bool {
	return rule == string(history.RuleOrders) || rule == string(history.RuleTransitions)
}

// promiseBroken reports whether the history shows damage no fencing mode
// allows: a key that made more than one order, or a violation of a
// fence-free rule.
func (h *HistoryCheck) promiseBroken() bool {
	if h == nil {
		return false
	}
	if h.DoubledKeys > 0 || (h.LostAcks != nil && h.LostAcks.OrdersPerKey > 1) {
		return true
	}
	for _, v := range h.Violations {
		if fenceFree(v.Rule) {
			return true
		}
	}
	return false
}

// failures lists what the history shows against what the run had to show:
// in every mode the fence-free rules and one order per key, fenced also
// the rest.
func (h *HistoryCheck) failures(expect string) []string {
	if h == nil {
		return nil
	}
	var f []string
	if h.Error != "" {
		f = append(f, "history not checked: "+h.Error)
	}
	if h.Internal > 0 {
		f = append(f, fmt.Sprintf("%d answers were 500s", h.Internal))
	}
	if h.NoRetryAfter > 0 {
		f = append(f, fmt.Sprintf("%d 503 answers came without Retry-After", h.NoRetryAfter))
	}
	if h.DoubledKeys > 0 {
		f = append(f, fmt.Sprintf("history: %d idempotency keys made more than one order", h.DoubledKeys))
	}
	var judged []HistoryViolation
	for _, v := range h.Violations {
		if expect == ExpectSafe || fenceFree(v.Rule) {
			judged = append(judged, v)
		}
	}
	for i, v := range judged {
		if i == 3 {
			f = append(f, fmt.Sprintf("… %d more history violations", len(judged)-i))
			break
		}
		f = append(f, fmt.Sprintf("history: SKU %s: %s: %s", shortSKU(v.SKU), v.Rule, firstLine(v.Message)))
	}
	switch expect {
	case ExpectSafe:
		if len(h.Undecided) > 0 {
			f = append(f, fmt.Sprintf("history: %d SKUs undecided within %v", len(h.Undecided), histCheckTimeout))
		}
	case ExpectDamage:
		if h.Error == "" && len(h.Violations) == 0 {
			f = append(f, "fencing off, yet the history checker found no violation: the race was not exercised")
		}
	}
	return f
}

// checkHistory reads the final state of the recorder's SKUs straight from
// Postgres (the API does not show idempotency keys), once every instance
// has stopped, and runs the checker.
func (e *chaosEnv) checkHistory(ctx context.Context, out *Run) {
	r := e.hist
	if r == nil {
		return
	}
	r.stop() // normally done already; never read while an operation runs
	hc := &HistoryCheck{SKUs: r.skus, Expiry: histExpiry, Violations: []HistoryViolation{},
		Retries: r.retries.Load(), StoreUnavailable: r.storeUnavailable.Load(),
		NoRetryAfter: r.noRetryAfter.Load(), Internal: r.internal.Load()}
	out.History = hc
	ops := r.h.Ops()
	hc.Operations = len(ops)
	for _, op := range ops {
		switch op.Outcome.Result {
		case history.OK:
			hc.OK++
		case history.Failed:
			hc.Failed++
		default:
			hc.Unknown++
		}
	}
	final, err := readFinal(ctx, e.dbConnect, r.skus)
	if err != nil {
		hc.Error = err.Error()
		return
	}
	hc.Orders = len(final.Orders)
	keys := map[string]int{}
	for _, o := range final.Orders {
		if keys[o.Key]++; o.Key != "" && keys[o.Key] == 2 {
			hc.DoubledKeys++
		}
	}
	stock := make(map[string]int64, len(r.skus))
	for _, s := range r.skus {
		stock[s] = int64(r.stock)
	}
	vis := filepath.Join(e.dir, "history")
	if err := os.MkdirAll(vis, 0o755); err != nil {
		hc.Error = err.Error()
		return
	}
	start := time.Now()
	rep, err := history.Check(ops, final, stock, history.WithTimeout(histCheckTimeout), history.WithVisualization(vis))
	hc.CheckMs = ms(time.Since(start))
	if err != nil {
		hc.Error = err.Error()
		return
	}
	for _, v := range rep.Violations {
		hc.Violations = append(hc.Violations, HistoryViolation{SKU: v.SKU, Rule: string(v.Rule), Message: v.Message})
	}
	hc.Undecided = rep.Undecided
	hc.Report = rep.String()
	e.prog.Printf("   history: %d operations (%d ok, %d failed, %d unknown), %d retries: %s\n",
		hc.Operations, hc.OK, hc.Failed, hc.Unknown, hc.Retries, firstViolating(rep))
}

// firstViolating is the checker's verdict with the first violation in full
// (its sub-history), and a count of the rest.
func firstViolating(rep history.Report) string {
	if rep.OK() {
		return rep.String()
	}
	s := fmt.Sprintf("%d violation(s); the first:\n%s", len(rep.Violations), rep.Violations[0])
	if len(rep.Undecided) > 0 {
		s += fmt.Sprintf("\nundecided: %v", rep.Undecided)
	}
	return s
}

// readFinal reads the orders with a line on skus, all their lines with
// the fence tokens they were written under, and the counters of skus.
func readFinal(ctx context.Context, connect func(context.Context) (*pgx.Conn, error), skus []string) (history.Final, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := connect(ctx)
	if err != nil {
		return history.Final{}, fmt.Errorf("final read: %w", err)
	}
	defer conn.Close(context.Background())
	final := history.Final{At: time.Now()}
	rows, err := conn.Query(ctx, `SELECT o.id::text, coalesce(o.idempotency_key, ''), o.status, o.expires_at, l.sku, l.quantity, l.fence_token
		FROM orders o JOIN order_lines l ON l.order_id = o.id
		WHERE o.id IN (SELECT order_id FROM order_lines WHERE sku = ANY($1))
		ORDER BY o.id, l.position`, skus)
	if err != nil {
		return history.Final{}, fmt.Errorf("final read of orders: %w", err)
	}
	for rows.Next() {
		var o history.FinalOrder
		var l history.Line
		if err := rows.Scan(&o.ID, &o.Key, &o.Status, &o.ExpiresAt, &l.SKU, &l.Quantity, &l.Token); err != nil {
			rows.Close()
			return history.Final{}, fmt.Errorf("final read of orders: %w", err)
		}
		if n := len(final.Orders); n > 0 && final.Orders[n-1].ID == o.ID {
			final.Orders[n-1].Lines = append(final.Orders[n-1].Lines, l)
			continue
		}
		o.Lines = []history.Line{l}
		final.Orders = append(final.Orders, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return history.Final{}, fmt.Errorf("final read of orders: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT sku, available, reserved, sold FROM skus WHERE sku = ANY($1)`, skus)
	if err != nil {
		return history.Final{}, fmt.Errorf("final read of SKUs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s history.FinalSKU
		if err := rows.Scan(&s.SKU, &s.Available, &s.Held, &s.Sold); err != nil {
			return history.Final{}, fmt.Errorf("final read of SKUs: %w", err)
		}
		final.SKUs = append(final.SKUs, s)
	}
	return final, rows.Err()
}

// notes are the report's lines on a run's history: the figures, then the
// checker's verdict with the first violating sub-history, if any.
func (h *HistoryCheck) notes() []string {
	if h == nil {
		return nil
	}
	out := []string{fmt.Sprintf("History: %d recorded operations on %d SKUs of their own (%d ok, %d failed, %d unknown), %d same-key retries, "+
		"%d answers 503 store_unavailable, %d 503s without Retry-After, %d 500s; %d orders in the final read, %d keys with more than one order; %s. Checked in %.0f ms.",
		h.Operations, len(h.SKUs), h.OK, h.Failed, h.Unknown, h.Retries, h.StoreUnavailable, h.NoRetryAfter, h.Internal, h.Orders, h.DoubledKeys, h.Expiry, h.CheckMs)}
	if la := h.LostAcks; la != nil {
		out = append(out, fmt.Sprintf("Lost commit acknowledgements: %d rounds, %d answers dropped, %d of them after a commit; %d retries returned the committed order, %d did not; at most %d order per key.",
			la.Rounds, la.Dropped, la.Committed, la.Replayed, la.Mismatched, la.OrdersPerKey))
	}
	if h.Error != "" {
		out = append(out, "History not checked: "+h.Error)
	}
	if h.Report != "" {
		out = append(out, "Checker: "+h.Report)
	}
	return out
}

// dbConnect opens a connection to the run's database, from the load
// tester's member in a namespaced run.
func (e *chaosEnv) dbConnect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(e.opts.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if e.net != nil {
		cfg.DialFunc = e.net.dial
	}
	return pgx.ConnectConfig(ctx, cfg)
}

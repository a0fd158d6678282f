package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/stack/pgproxy"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/history"
	"github.com/stockguard/stockguard/loadtest/procs"
	"github.com/stockguard/stockguard/loadtest/run"
)

// lostAckRounds is how many commit acknowledgements lost-commit-ack loses,
// one order each.
const lostAckRounds = 3

// LostAcks are lost-commit-ack's probes: orders whose write's answer the
// proxy dropped after Postgres had answered, and what their same-key
// retries returned.
type LostAcks struct {
	Rounds int `json:"rounds"`
	// Dropped counts the answers the proxy dropped, Committed those whose
	// write Postgres had committed.
	Dropped   int `json:"dropped"`
	Committed int `json:"committed"`
	// Replayed counts retries that returned the first order; Mismatched
	// retries that returned another order, or none for a committed write.
	Replayed   int `json:"replayed"`
	Mismatched int `json:"mismatched"`
	// OrdersPerKey is the most orders one probe's key made (want 1).
	OrdersPerKey int `json:"orders_per_key"`
}

func lostCommitAckScenario() *scenario {
	return &scenario{
		Name: "lost-commit-ack", Backends: []string{"redis"},
		Summary: "An extra instance reaches Postgres through a proxy that forwards its write, waits for Postgres to commit it, then drops the answer and both connections; the client retries with the same Idempotency-Key: the same order comes back, and no unit is reserved twice.",
		fault:   lostCommitAck,
		finish: func(ctx context.Context, e *chaosEnv, r *Run) {
			finishHistory(ctx, e, r)
			if r.History != nil && e.pg != nil && e.pg.lostAcks != nil {
				n, err := ordersPerKey(ctx, e.opts.DatabaseURL, e.pg.lostAcks.keys)
				if err != nil {
					r.History.Error = err.Error()
				}
				e.pg.lostAcks.figures.OrdersPerKey = n
				r.History.LostAcks = &e.pg.lostAcks.figures
			}
		},
		// The fault happened only if every round lost the answer to a
		// committed write, fencing on or off: a proxy rule that matched no
		// write drops nothing, and the run would pass having tested nothing.
		exercised: func(r *Run) []string {
			h := r.History
			if h == nil || h.LostAcks == nil {
				return []string{"no lost-ack probe ran"}
			}
			return lostAcksShort(*h.LostAcks)
		},
		always: func(r *Run) []string {
			h := r.History
			if h == nil || h.LostAcks == nil {
				return nil // exercised said so
			}
			var out []string
			la := h.LostAcks
			if la.Mismatched > 0 {
				out = append(out, fmt.Sprintf("%d same-key retries did not return the committed order", la.Mismatched))
			}
			if la.OrdersPerKey > 1 {
				out = append(out, fmt.Sprintf("one key made %d orders", la.OrdersPerKey))
			}
			return out
		},
	}
}

// lostAckRig is what lost-commit-ack keeps for its finish.
type lostAckRig struct {
	keys    []string
	figures LostAcks
}

// isOrderWrite picks the service's one write statement (writeSQL in
// internal/postgres): the only one that inserts order lines.
func isOrderWrite(c pgproxy.Commit) bool {
	return strings.Contains(c.Statement, "INSERT INTO order_lines")
}

func lostCommitAck(ctx context.Context, e *chaosEnv) error {
	if e.opts.DatabaseURL == "" {
		return errors.New("lost-commit-ack needs --database-url: the proxy must know the server")
	}
	upstream, err := dbAddr(e.opts.DatabaseURL)
	if err != nil {
		return err
	}
	proxy, err := pgproxy.New(ctx, upstream, pgproxy.WithAckTimeout(5*time.Second))
	if err != nil {
		return err
	}
	e.pg = &pgRig{proxy: proxy}
	proxied, err := withHostPort(e.opts.DatabaseURL, proxy.Addr())
	if err != nil {
		return err
	}
	// The extra instance is the only one behind the proxy; the steady load
	// never sends to it, so every write the proxy sees is a probe's.
	opts := e.opts
	opts.DatabaseURL, opts.LogDir = proxied, e.logDir("proxied")
	if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return err
	}
	ins, err := procs.Start(ctx, opts, 1, e.cc.StartupTimeout)
	if err != nil {
		return fmt.Errorf("start the proxied instance: %w", err)
	}
	e.addLoop(ins)
	inst := len(e.ins) - 1
	rec, err := e.newHistRecorder(ctx, 1, histStock)
	if err != nil {
		return err
	}
	e.pg.lostAcks = &lostAckRig{figures: LostAcks{Rounds: lostAckRounds}}
	for round := range lostAckRounds {
		if err := e.lostAckRound(ctx, rec, proxy, inst, round); err != nil {
			return err
		}
	}
	return tallyDrops(&e.pg.lostAcks.figures, proxy.Dropped())
}

// tallyDrops counts the proxy's drops into la and fails unless every round
// dropped the answer to a write Postgres had committed.
func tallyDrops(la *LostAcks, drops []pgproxy.Drop) error {
	la.Dropped, la.Committed = len(drops), 0
	for _, d := range drops {
		if d.Committed() {
			la.Committed++
		}
	}
	if short := lostAcksShort(*la); len(short) > 0 {
		return errors.New(strings.Join(short, "; "))
	}
	return nil
}

// lostAcksShort says how the probes fell short of losing one committed
// answer per round.
func lostAcksShort(la LostAcks) []string {
	var out []string
	if la.Dropped != la.Rounds {
		out = append(out, fmt.Sprintf("%d of %d rounds dropped an answer: the scenario did not exercise the fault every round (does isOrderWrite still match the service's order write?)", la.Dropped, la.Rounds))
	}
	if la.Committed != la.Dropped {
		out = append(out, fmt.Sprintf("%d of %d dropped answers came after a commit", la.Committed, la.Dropped))
	}
	return out
}

// lostAckRound arms the proxy, sends one order to the proxied instance and
// then retries it with the same key, to that instance and to another.
func (e *chaosEnv) lostAckRound(ctx context.Context, rec *histRecorder, proxy *pgproxy.Proxy, inst, round int) error {
	la := &e.pg.lostAcks.figures
	key := fmt.Sprintf("%s-lostack-%d", rec.runID, round)
	lines := []history.Line{{SKU: rec.skus[0], Quantity: 5}}
	body, err := json.Marshal(client.OrderRequest{HoldSeconds: histHold, Lines: []client.OrderLine{{SKU: lines[0].SKU, Quantity: 5}}})
	if err != nil {
		return err
	}
	e.pg.lostAcks.keys = append(e.pg.lostAcks.keys, key)
	before := len(proxy.Dropped())
	proxy.ArmAutocommit(1, isOrderWrite)
	from := e.event(EventFault, "round %d: proxy armed to drop the answer of instance %d's next order write, after Postgres has answered it", round+1, inst+1)
	id := rec.h.Invoke(history.Op{Client: round, Kind: history.Place, Key: key, Lines: lines})
	first := rec.client.PlaceOrder(ctx, rec.urls[inst], key, body)
	rec.note(first)
	// The drop is recorded once the proxy has closed both connections.
	for range 100 {
		if len(proxy.Dropped()) > before {
			break
		}
		run.Sleep(ctx, 20*time.Millisecond)
	}
	proxy.ArmAutocommit(0, nil)
	drop := "none"
	if d := proxy.Dropped(); len(d) > before {
		drop = fmt.Sprintf("server answered %q, never delivered", d[before].Answer)
	}
	e.event(EventOutcome, "round %d: first answer %s (dropped answer: %s)", round+1, describeOutcome(first), drop)
	// The client does not trust any first answer here: it asks again with
	// the same key, as it must after a 503, and compares.
	var got []client.Outcome
	settled := false
	for _, to := range []int{inst, 0} {
		var out client.Outcome
		out, settled = rec.attempts(ctx, to, history.Place, 1, func(ctx context.Context, url string, _ int) client.Outcome {
			return rec.client.PlaceOrder(ctx, url, key, body)
		})
		got = append(got, out)
	}
	e.window(from, e.event(EventHeal, "round %d: same-key retries to instances %d and 1 answered %s and %s",
		round+1, inst+1, describeOrder(got[0]), describeOrder(got[1])))
	final := got[len(got)-1]
	same := final.Kind == client.KindReserved
	for _, o := range append(got, first) {
		if o.Kind == client.KindReserved && final.Kind == client.KindReserved && o.Order.OrderID != final.Order.OrderID {
			same = false
		}
	}
	if same {
		la.Replayed++
	} else {
		la.Mismatched++
	}
	// One operation for all attempts: the checker sees the key once.
	rec.h.Complete(id, rec.placeOutcome(final, settled, lines))
	return nil
}

// describeOrder is describeOutcome with the order id of a 201.
func describeOrder(out client.Outcome) string {
	if out.Kind == client.KindReserved && out.Order != nil {
		return fmt.Sprintf("201 order %s", out.Order.OrderID)
	}
	return describeOutcome(out)
}

// ordersPerKey is the most orders any of keys made, read from Postgres.
func ordersPerKey(ctx context.Context, dsn string, keys []string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, fmt.Errorf("count orders per key: %w", err)
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, `SELECT coalesce(max(c), 0) FROM (SELECT count(*) AS c FROM orders WHERE idempotency_key = ANY($1) GROUP BY idempotency_key) x`, keys).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count orders per key: %w", err)
	}
	return n, nil
}

// dbAddr is the host:port of a database URL or keyword/value string.
func dbAddr(dsn string) (string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("database url: %w", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return "", fmt.Errorf("database url: %s is a Unix socket; the proxy needs TCP", cfg.Host)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// withHostPort points dsn at addr instead of its server.
func withHostPort(dsn, addr string) (string, error) {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Host = addr
		return u.String(), nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	// In keyword/value form a later keyword overrides an earlier one.
	return dsn + " host=" + host + " port=" + port, nil
}

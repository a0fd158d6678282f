package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/pgproxy"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/run"
)

// Figures of the Postgres scenarios.
const (
	// pgDown is how long the private cluster stays down in postgres-restart:
	// long enough that every instance meets a dead connection and a refused
	// one, short enough that clients retrying for histRetryLimit get through.
	pgDown = 1500 * time.Millisecond
	// histClients and histSKUs are the recorded clients and their SKUs.
	histClients = 6
	histSKUs    = 3
	histStock   = 10_000
)

// pgRig is a scenario's own Postgres, which it may stop, and the proxy some
// instances reach it through; the shared stack's cluster is never touched.
type pgRig struct {
	pg    *stack.Postgres // nil: the shared database (lost-commit-ack)
	proxy *pgproxy.Proxy
	// lostAcks are lost-commit-ack's probes.
	lostAcks *lostAckRig
}

func (r *pgRig) close() {
	if r.proxy != nil {
		_ = r.proxy.Close()
	}
	if r.pg != nil {
		_ = r.pg.Close()
	}
}

// startPrivatePostgres starts the run's own cluster and points the
// instances at a fresh database in it.
func (e *chaosEnv) startPrivatePostgres(ctx context.Context) error {
	pg, err := stack.StartPostgres(ctx, e.dir)
	if err != nil {
		return err
	}
	e.pg = &pgRig{pg: pg}
	dsn, err := pg.CreateDatabase(ctx, "stockguard")
	if err != nil {
		return err
	}
	e.opts.DatabaseURL = dsn
	return nil
}

// finishHistory checks the recorded history; the finish of every scenario
// that records one.
func finishHistory(ctx context.Context, e *chaosEnv, r *Run) { e.checkHistory(ctx, r) }

func postgresRestartScenario() *scenario {
	return &scenario{
		Name: "postgres-restart", Backends: []string{"redis"},
		Summary: "Fast shutdown and start of the run's own Postgres under load (recorded clients place, confirm and cancel with idempotent retries): orders in flight answer 503 store_unavailable with Retry-After, never 500; instances reconnect by themselves; each key makes exactly one order.",
		setup: func(ctx context.Context, e *chaosEnv) error {
			if err := e.startPrivatePostgres(ctx); err != nil {
				return err
			}
			return e.startServers(ctx)
		},
		fault:  postgresRestart,
		finish: finishHistory,
		// Fenced or not, a Postgres that was down answers someone 503
		// store_unavailable: the recorded clients or the steady load.
		exercised: func(r *Run) []string {
			if (r.History == nil || r.History.StoreUnavailable == 0) && r.Orders.ErrorCodes["store_unavailable"] == 0 {
				return []string{"no 503 store_unavailable while Postgres was down"}
			}
			return nil
		},
		check: func(r *Run) []string {
			out := needRecovery(r)
			if n := r.Orders.ErrorCodes["internal"]; n > 0 {
				out = append(out, fmt.Sprintf("%d orders of the steady load answered 500", n))
			}
			return out
		},
	}
}

func postgresRestart(ctx context.Context, e *chaosEnv) error {
	rec, err := e.newHistRecorder(ctx, histSKUs, histStock)
	if err != nil {
		return err
	}
	rec.run(ctx, histClients, e.cc.Seed)
	run.Sleep(ctx, e.cc.Warmup)
	pg := e.pg.pg
	from := e.event(EventFault, "fast shutdown of the run's Postgres (pid %d): open transactions rolled back, every connection closed; down for %v", pg.PID(), pgDown)
	t0 := time.Now()
	if err := pg.Stop(); err != nil {
		return err
	}
	stopped := time.Since(t0)
	run.Sleep(ctx, pgDown)
	t1 := time.Now()
	if err := pg.Start(ctx); err != nil {
		return err
	}
	e.heal(nil, "Postgres started again (pid %d) on the same port (shutdown took %v, start-up %v); the instances must reconnect by themselves",
		pg.PID(), stopped.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	e.window(from, e.healAt)
	run.Sleep(ctx, e.cc.Recovery)
	rec.stop()
	return e.everyInstanceRecovered()
}

// everyInstanceRecovered fails unless each instance reserved an order after
// the heal: one that never reconnects would go unseen in the figures.
func (e *chaosEnv) everyInstanceRecovered() error {
	e.mu.Lock()
	healAt := e.healAt
	e.mu.Unlock()
	first := make(map[int]time.Duration)
	for _, x := range e.load.snapshot() {
		if x.kind == client.KindReserved && x.done >= healAt {
			if d, ok := first[x.inst]; !ok || x.done-healAt < d {
				first[x.inst] = x.done - healAt
			}
		}
	}
	for i := range e.load.urls {
		d, ok := first[i]
		if !ok {
			return fmt.Errorf("instance %d reserved no order after the heal: it did not reconnect", i+1)
		}
		e.event(EventNote, "instance %d: first 201 %v after the heal", i+1, d.Round(time.Millisecond))
	}
	return nil
}

// logDir is a directory of the run's for an extra instance's log.
func (e *chaosEnv) logDir(name string) string { return filepath.Join(e.dir, name) }

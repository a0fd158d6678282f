package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/stockguard/stockguard/internal/cliflag"
	"github.com/stockguard/stockguard/internal/gctune"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/lock/locktrace"
	"github.com/stockguard/stockguard/internal/metrics"
	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/reservation"
	"github.com/stockguard/stockguard/internal/tracing"
)

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := cliflag.New("stockguard serve", envPrefix, stdout, stderr)
	fs.About("Runs the HTTP service: per-SKU locks from --lock, writes fenced with the lease's token.")
	fs.Example("stockguard serve --lock=redlock --redis-addrs=127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393")
	fs.Example("STOCKGUARD_LOCK=zookeeper STOCKGUARD_ZK_SERVERS=zk1:2181 stockguard serve --addr=:8080")
	c.register(fs.FlagSet)
	if err := fs.Parse(args, getenv); err != nil {
		return cliflag.Done(err)
	}
	if err := c.validate(); err != nil {
		return fs.Reject(err)
	}
	log := c.logger(stderr).With("backend", c.lock)
	routeLibraryLogs(log)
	defer gctune.Apply(getenv)()
	tracer, flushTraces, err := startTracing(ctx, getenv, log)
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: the spans of the leases released
	// and the connections closed on the way out are exported too.
	defer flushTraces()
	tp := tracer.TracerProvider() // nil when off: then nothing below installs any tracing

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	locker, err := newLocker(ctx, &c, reg, log)
	if err != nil {
		return stoppedStarting(ctx, log, "lock backend", err)
	}
	defer locker.Close()
	zkSession := httpapi.ZKSessionOf(locker) // of the backend: the decorator does not forward it
	if tp != nil {
		locker = locktrace.Wrap(locker, tp)
	}
	// Whether writes are fenced is the locker's to say: a backend without a
	// token source cannot be fenced whatever the flag asks.
	fenced := c.fencing == "on" && locker.Fenced()
	switch {
	case c.fencing == "off":
		log.Warn("fencing is OFF (--fencing=off): writes are not checked against the lease token; a stale holder can oversell")
	case !fenced:
		log.Warn("fencing is OFF: this backend issues no fencing tokens, so writes run unchecked; expect oversell with several instances")
	}

	store, err := postgres.Open(ctx, c.databaseURL, postgres.WithFencing(fenced),
		postgres.WithMaxConns(c.dbMaxConns), postgres.WithLogger(log), postgres.WithTracer(tp))
	if err != nil {
		return stoppedStarting(ctx, log, "database", err)
	}
	defer store.Close()
	if !c.migrate {
		log.Info("not applying migrations (--migrate=false)")
	} else if applied, err := postgres.Migrate(ctx, store.DB(), postgres.WithLockWaitReport(migrationWaitReport,
		func(holder int, waited time.Duration) {
			log.Info("waiting for the migration lock, held by another process (another instance migrating, or a stuck session)",
				"holder_pid", holder, "waited", waited.Round(time.Second).String())
		})); err != nil {
		return stoppedStarting(ctx, log, "migrations", err)
	} else if len(applied) > 0 {
		log.Info("migrations applied", "files", applied)
	}
	stopDebug, err := startDebug(c.debugAddr, log)
	if err != nil {
		return err
	}
	defer stopDebug()

	m := metrics.New(reg, c.lock)
	metrics.RegisterBuildInfo(reg, metrics.BuildInfo{Version: readVersion().Version, Backend: c.lock,
		Fencing: fenced, Coalesce: !c.coalesceCfg.Disabled})
	metrics.RegisterPool(reg, store.DB())
	// Every instance times holds by the database's clock, not its own.
	clock, err := store.StartClock(ctx, postgres.WithClockLogger(log), postgres.WithClockObserver(m.ClockOffset))
	if err != nil {
		return stoppedStarting(ctx, log, "database clock", err)
	}
	defer clock.Close()
	svc := reservation.New(reservation.Config{Store: store, Locker: locker, Observer: m, Logger: log,
		LockWait: c.lockWait, TTL: c.lockTTL, Now: clock.Now, Coalescing: c.coalesceCfg, Tracer: tracing.NewTracer(tp)})
	probe := metrics.NewLockProbe(reg, c.lock, locker.Ping, lockProbeTimeout)
	reqTimeout := requestTimeout(c.lockWait, c.chaos)
	var gatherer prometheus.Gatherer = reg
	if c.limits.metricsAddr != "" {
		gatherer = nil // served on its own listener below
	}
	handler := httpapi.New(httpapi.Config{Service: svc, Metrics: m, Gatherer: gatherer, Logger: log,
		AdminToken: c.adminToken, Chaos: c.chaos, ZKSession: zkSession,
		MaxInFlight: c.limits.maxInFlight, RequestTimeout: reqTimeout, TracerProvider: tp, LockProbe: probe})

	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := c.limits.server(m.InFlight(handler), reqTimeout, log)
	servers := []*http.Server{srv}
	if c.limits.metricsAddr != "" {
		msrv, err := serveMetrics(c.limits.metricsAddr, reg, &c.limits, log)
		if err != nil {
			_ = ln.Close()
			return err
		}
		servers = append(servers, msrv)
	}

	reapCtx, stopReaper := context.WithCancel(context.WithoutCancel(ctx))
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		if !c.migrate {
			awaitMigrations(reapCtx, store, c.reapInterval, log)
		}
		svc.Reap(reapCtx, c.reapInterval)
	}()
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		watchLock(reapCtx, probe.Check, lockProbeInterval, log)
	}()

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	gogc, memLimit := gctune.Settings()
	log.Info("serving", "addr", ln.Addr().String(), "fencing", fenced, "lock_ttl", c.lockTTL.String(), "lock_wait", c.lockWait.String(), "chaos", c.chaos,
		"coalesce", c.coalesce, "gogc", gogc, "gomemlimit", memLimit)
	warnOpenAdmin(log, c.addr, c.adminToken)
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		stopReaper()
		<-reaped
		<-probed
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Drain: in-flight requests finish and release their leases on the way
	// out; new connections are refused. What is still open when the
	// shutdown timeout ends (a client trickling its body, a request stuck
	// in a backend) is closed: a stop is a stop, and exits 0.
	log.Info("shutting down: draining in-flight requests", "shutdown_timeout", c.limits.shutdownTimeout.String())
	stopReaper()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.limits.shutdownTimeout)
	defer cancel()
	var errs []error
	for _, s := range servers {
		errs = append(errs, shutdown(shutdownCtx, s, log))
	}
	<-reaped
	<-probed
	// Batch leaders may still be acquiring leases for orders whose clients
	// have gone: they answer and release what they hold. At the deadline
	// Close cancels those still running and returns once each has answered
	// and released its leases (a release that fails leaves the lease to its
	// TTL), so a deadline here is a stop like the listeners', not a failure.
	if err := svc.Close(shutdownCtx); errors.Is(err, context.DeadlineExceeded) {
		log.Warn("shutdown timeout reached: the batches still running were cancelled and released their leases", "err", err)
	} else {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// awaitMigrations returns once store's schema is current, or ctx ends.
// Started with --migrate=false before its migration job has run, serve has
// no tables yet: the reaper would log an error every tick until the job
// runs, where one warning says what it waits for (/readyz answers
// not_ready meanwhile). A check that fails otherwise (a dropped
// connection, the database restarting or down) says nothing of the job,
// so the wait goes on: the store is not answering, which /readyz already
// reports, and the reaper has nothing to do until it answers. The wait is
// unbounded on purpose; ctx, cancelled at SIGTERM, ends it.
func awaitMigrations(ctx context.Context, store *postgres.Store, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	warned := false
	for {
		err := store.Ping(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			if warned {
				log.Info("reaper: migrations applied, expiring holds")
			}
			return
		case errors.Is(err, postgres.ErrMigrationsPending) && !warned:
			log.Warn("reaper: waiting for the migrations (--migrate=false: the migration job has not run yet); no hold expires until then")
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// migrationWaitReport is how often serve repeats that it waits for the
// migration lock.
const migrationWaitReport = 10 * time.Second

// stoppedStarting is what a start step's failure err means: nothing, when
// ctx ended (SIGTERM, Ctrl-C) while serve was still starting, since a stop
// asked for before serving is as clean as one while serving; err otherwise.
func stoppedStarting(ctx context.Context, log *slog.Logger, step string, err error) error {
	if ctx.Err() == nil {
		return err
	}
	log.Info("stopped while starting: signal received", "step", step, "err", err)
	return nil
}

func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	var resetFences, confirmed bool
	fs := cliflag.New("stockguard migrate", envPrefix, stdout, stderr)
	fs.About("Applies the pending database migrations and exits (what serve does at start unless --migrate=false).\n\n" +
		"--reset-fences then clears every SKU row's fence token, to move a deployment to another lock backend:\n" +
		"tokens of different backends are not comparable, and rows fenced by the old one can refuse every write\n" +
		"of the new one (409 stale_fence). Run it only with every replica stopped, and confirm that with --yes;\n" +
		"rows fenced again within a second of the reset (a replica still running) make it fail (exit 1).")
	fs.Example("stockguard migrate --database-url=postgres://stockguard@db:5432/stockguard")
	fs.Example("stockguard migrate --reset-fences --yes   # every replica stopped, before starting them on another --lock")
	fs.StringVar(&c.databaseURL, "database-url", defaultDatabaseURL, "PostgreSQL URL")
	fs.BoolVar(&resetFences, "reset-fences", false,
		"after migrating, set every SKU row's fence token to 0 (for a change of --lock); needs --yes")
	fs.BoolVar(&confirmed, "yes", false, "confirm --reset-fences: no replica of the service is running")
	fs.CommandLineOnly("reset-fences", "yes")
	if err := fs.Parse(args, getenv); err != nil {
		return cliflag.Done(err)
	}
	if err := checkDatabaseURL(c.databaseURL); err != nil {
		return fs.Reject(err)
	}
	if confirmed && !resetFences {
		return fs.Reject(fmt.Errorf("%w: --yes confirms --reset-fences and means nothing without it", errUsage))
	}
	// A replica still running on the old backend claims rows with its own
	// tokens again, above the new backend's: the new one's writes are
	// refused once more, and a lease of the old one that was overtaken
	// while paused is no longer fenced out once the new backend has
	// lowered the rows' tokens.
	if resetFences && !confirmed {
		return fs.Reject(fmt.Errorf("%w: --reset-fences needs --yes: run it only with every replica stopped (scale to 0); "+
			"one still running on the old lock backend would stamp its tokens again, and its overtaken leases would pass the fence", errUsage))
	}
	store, err := postgres.Open(ctx, c.databaseURL)
	if err != nil {
		return err
	}
	defer store.Close()
	applied, err := postgres.Migrate(ctx, store.DB())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "applied %d migration(s)\n", len(applied))
	for _, a := range applied {
		fmt.Fprintln(stdout, " ", a)
	}
	if !resetFences {
		return nil
	}
	n, err := store.ResetFences(ctx)
	if err != nil {
		return err
	}
	if err := checkNoneRefenced(ctx, store); err != nil {
		return fmt.Errorf("reset the fence token of %d SKU row(s) to 0, but %w", n, err)
	}
	fmt.Fprintf(stdout, "reset the fence token of %d SKU row(s) to 0: start the replicas on the new --lock\n", n)
	return nil
}

// refenceWatch is how long migrate --reset-fences watches for rows fenced
// again after the reset. A replica still serving claims the rows it writes
// within milliseconds (its next order); one that sees no order in this
// time goes unnoticed, which is why the replicas must be stopped first.
const refenceWatch = time.Second

// checkNoneRefenced waits for refenceWatch, then fails if a row of store carries a
// fence token again: a replica is still running and claimed it since the
// reset. It would undo the switch (its old backend's tokens refuse the new
// one's leases again) without a word, so this is an error a script sees.
func checkNoneRefenced(ctx context.Context, store *postgres.Store) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("stopped before checking that no replica fenced them again: %w", context.Cause(ctx))
	case <-time.After(refenceWatch):
	}
	again, err := store.FencedRows(ctx)
	if err != nil {
		return fmt.Errorf("checking that no replica fenced them again: %w", err)
	}
	if again > 0 {
		return fmt.Errorf("%d SKU row(s) carry a fence token again %s later: a replica is still running on some lock backend; "+
			"stop every replica (scale to 0) and run it again", again, refenceWatch)
	}
	return nil
}

// The service's observer is the metrics. The service calls the optional
// hooks only on an observer that has them, so a hook missing here would
// drop its metric without a word.
var _ interface {
	reservation.Observer
	reservation.BatchObserver
	reservation.SectionObserver
	reservation.ReapObserver
} = (*metrics.Metrics)(nil)

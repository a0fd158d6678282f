// Package pglock is the postgres lock backend: session-level
// pg_advisory_locks held on a dedicated pooled connection, with the fencing
// token drawn from a Postgres sequence after the lock is granted.
//
// One acquisition uses one connection however many keys it takes: a lone
// Acquire, a batch (AcquireBatch: every key tried in one statement) and a
// multi-key operation (AcquireAll: every key locked in key order, in two
// statements when none is held elsewhere) each hold their locks on a
// connection of their own, so an order of a hundred lines needs one
// connection, not a hundred. Each lease still releases its own key; the
// connection returns to the pool with the last.
// A multi-key AcquireAll waits for its first key as long as its context
// allows; it holds keys while it waits for a later one at most the
// hold-wait bound (lock.WithHoldWait, default 1s), then frees them all and
// waits for that key holding nothing, in line from then on as long as its
// context allows, as lock.AcquireAll does.
//
// A lease lives exactly as long as its database session. Each lease sets its
// session's idle_session_timeout to the lease TTL, so a holder that stops
// talking to the server (paused, partitioned, dead) has its session ended by
// the server once the TTL has passed, which releases the advisory lock: the
// same expiry as the TTL backends, which the chaos scenarios rely on. The
// watchdog's keepalive is a trivial statement that restarts the server's idle
// timer.
//
// Between statements the Locker reads each lease session's connection, so a
// session that the server ends (pg_terminate_backend, a shutdown or crash)
// loses its leases the moment the server says so or the socket closes. A
// server that falls silent without closing the socket (a frozen host, a
// partition) is noticed by the keepalive, at the latest at the lease's
// Deadline, which comes before the server's idle timeout could free the lock.
//
// Lock keys are hashtextextended('stockguard:' || key, 0), one 64-bit
// advisory lock per key in the database of the URL. Tokens are values of the
// sequence stockguard_lock_fence in that database, which New creates.
// pg_stat_activity names lock sessions stockguard-lock, and a session holding
// or waiting for leases stockguard-lease:<id of its first lease>.
//
// Needs PostgreSQL 14 or later (idle_session_timeout) and a direct or
// session-pooled connection: session advisory locks mean nothing behind a
// transaction-pooling proxy.
package pglock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
)

const backendName = "postgres"

// Application names make pg_stat_activity tell lock connections apart, and
// tell which lease (the uuid the store records as fence_holder) a session
// holds or waits for.
const (
	poolAppName    = "stockguard-lock"
	controlAppName = "stockguard-lock-control"
	leaseAppPrefix = "stockguard-lease:"
)

const (
	// tryLockSQL is TryOnce's attempt. Like lockSQL it labels the session
	// with the lease and arms the idle timeout, harmless while the statement
	// runs: a busy session is not idle. CASE evaluates nextval only once the
	// lock is granted, so a token is always drawn after the lock and
	// successive holders' tokens increase.
	tryLockSQL = `SELECT set_config('application_name', $2, false), set_config('idle_session_timeout', $3, false),
	CASE WHEN pg_try_advisory_lock(hashtextextended('stockguard:' || $1, 0)) THEN nextval('stockguard_lock_fence') END`
	// lockSQL waits in the server's lock queue, first come first served (a
	// new request, tried or not, yields to queued waiters); nextvalSQL
	// follows it in the same pipeline.
	lockSQL = `SELECT set_config('application_name', $2, false), set_config('idle_session_timeout', $3, false),
	pg_advisory_lock(hashtextextended('stockguard:' || $1, 0))`
	nextvalSQL = `SELECT nextval('stockguard_lock_fence')`
	// unlockKeysSQL releases leases of a session, one key or a batch's, in
	// one statement; unlockSQL, for a session's last leases, also disarms
	// the idle timeout, or the server would end the pooled session after
	// one TTL of idleness between leases.
	unlockKeysSQL = `SELECT bool_and(pg_advisory_unlock(hashtextextended('stockguard:' || k, 0))) FROM unnest($1::text[]) AS k`
	unlockSQL     = `SELECT (` + unlockKeysSQL + `),
	set_config('application_name', $2, false), set_config('idle_session_timeout', '0', false)`
	resetSQL = `SELECT set_config('application_name', $1, false), set_config('idle_session_timeout', '0', false)`
	// keepaliveSQL: any statement restarts the server's idle timer, and a
	// session that answers still holds its session-level locks.
	keepaliveSQL = `SELECT 1`

	// The statements of a multi-key session. A waiting AcquireAll waits
	// for one key at a time (lockAllSQL with one key, then nextvalSQL),
	// holding only smaller keys, so two acquisitions over overlapping keys
	// cannot wait on each other in a cycle. tryAllSQL draws each obtained
	// key's token right after its lock. unlockEverySQL frees a waiting
	// AcquireAll's keys, keeping the session's labels, in the pipeline of
	// its next wait.
	settingsSQL    = `SELECT set_config('application_name', $1, false), set_config('idle_session_timeout', $2, false)`
	lockAllSQL     = `SELECT pg_advisory_lock(hashtextextended('stockguard:' || k, 0)) FROM unnest($1::text[]) AS k`
	unlockEverySQL = `SELECT pg_advisory_unlock_all()`
	tryAllSQL      = `SELECT array_agg(CASE WHEN pg_try_advisory_lock(hashtextextended('stockguard:' || k, 0))
	THEN nextval('stockguard_lock_fence') END ORDER BY i) FROM unnest($1::text[]) WITH ORDINALITY AS t(k, i)`
	// unlockAllSQL frees what an all-or-nothing try obtained when it did
	// not obtain everything; the session is the acquisition's own, so all
	// of its locks are ours.
	unlockAllSQL = `SELECT pg_advisory_unlock_all(), set_config('application_name', $1, false), set_config('idle_session_timeout', '0', false)`
)

const (
	// cancelRetry spaces the cancel requests of an abandoned wait. The
	// server ignores a cancel request that reaches the backend while it is
	// not running a statement (before the lock statement's Execute message
	// has arrived, say), so one request is not enough.
	cancelRetry = 100 * time.Millisecond
	// cancelGrace is how long a caller whose context ended waits for the
	// server to answer the cancel: the first request and two retries, which
	// a server that answers at all lands within. Past it the caller gets
	// lock.ErrCleanupPending and the cancel goes on in the background.
	cancelGrace = 3 * cancelRetry
	// cancelGiveUp is how long an abandoned wait may take to be cancelled by
	// the server before the socket is closed instead. A wait that ended at
	// a bound of its own (AcquireAll's hold-wait) while its caller's context
	// lasts waits that long for the answer, not cancelGrace.
	cancelGiveUp = 5 * time.Second
	// checkInterval is client_connection_check_interval: a backend waiting
	// for a lock does not read its socket, and without the check a waiter
	// whose process died would still be granted the lock, and hold it until
	// it next touched the dead socket.
	checkInterval = "1s"
	// refreshAfter: a wait longer than TTL/refreshAfter is followed by a
	// keepalive, so that the lease starts with (nearly) its whole TTL.
	refreshAfter = 10
	// discardTimeout bounds the statement that frees a failed acquisition's
	// locks; past it the connection is closed instead.
	discardTimeout = time.Second
)

var errClosed = fmt.Errorf("%w: locker closed", lock.ErrUnavailable)

// Locker is the postgres lock backend. It is safe for concurrent use.
type Locker struct {
	pool *pgxpool.Pool // lock connections: one per acquisition, held or waiting
	// ctl serves Ping and setup. It is separate so that a pool full of
	// waiters, normal under contention, does not fail readiness probes.
	ctl *pgxpool.Pool
	ttl time.Duration
	log *slog.Logger
	m   *lockmetrics.Metrics

	// closing is cancelled by Close, ending every wait and keepalive in
	// flight, so that Close can end their connections.
	closing  context.Context
	shutdown context.CancelFunc
	// closeSockets, called as Close returns, closes every socket of the
	// lock pool still open (see closeWith).
	closeSockets context.CancelFunc

	mu     sync.Mutex
	closed bool
	live   map[*session]struct{}
	// cleanups are the cancels a caller left to the background (see
	// send); Close waits for them. Added to under mu, only before closed.
	cleanups sync.WaitGroup
}

var _ lock.Locker = (*Locker)(nil)

// New connects to the database at databaseURL, checks that the server can
// expire leases (PostgreSQL 14 or later), and creates the fence sequence
// stockguard_lock_fence if it does not exist. An unreachable server is an
// error wrapping lock.ErrUnavailable.
func New(ctx context.Context, databaseURL string, opts ...Option) (*Locker, error) {
	o := options{ttl: defaultTTL, maxConns: defaultMaxConns}
	for _, opt := range opts {
		opt(&o)
	}
	if o.ttl <= 0 {
		return nil, fmt.Errorf("pglock: TTL %v is not positive", o.ttl)
	}
	if o.maxConns < 1 {
		return nil, fmt.Errorf("pglock: max connections %d is below 1", o.maxConns)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	m, err := lockmetrics.New(o.reg, backendName)
	if err != nil {
		return nil, fmt.Errorf("pglock: metrics: %w", err)
	}

	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("pglock: database url: %w", err)
	}
	// The waits are bounded by the caller's context, never by server-side
	// timeouts a database or role may set for the store's queries; an idle
	// pooled session must not be ended either.
	for k, v := range map[string]string{
		"statement_timeout":                   "0",
		"lock_timeout":                        "0",
		"idle_in_transaction_session_timeout": "0",
	} {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	ctlCfg := cfg.Copy()
	ctlCfg.MaxConns, ctlCfg.MinConns, ctlCfg.MinIdleConns = 1, 0, 0
	ctlCfg.ConnConfig.RuntimeParams["application_name"] = controlAppName

	// Parameters that only exist from PostgreSQL 14 on: in the startup
	// packet of an older server they would fail the connection before setup
	// could say why.
	cfg.MaxConns, cfg.MinConns, cfg.MinIdleConns = o.maxConns, 0, 0
	cfg.ConnConfig.RuntimeParams["application_name"] = poolAppName
	cfg.ConnConfig.RuntimeParams["idle_session_timeout"] = "0"
	cfg.ConnConfig.RuntimeParams["client_connection_check_interval"] = checkInterval

	ctl, err := pgxpool.NewWithConfig(ctx, ctlCfg)
	if err != nil {
		return nil, fmt.Errorf("pglock: %w: %w", lock.ErrUnavailable, err)
	}
	if err := setup(ctx, ctl); err != nil {
		ctl.Close()
		return nil, fmt.Errorf("pglock: %w", err)
	}
	sockets, closeSockets := context.WithCancel(context.Background())
	cfg.ConnConfig.DialFunc = closeWith(sockets, cfg.ConnConfig.DialFunc)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		closeSockets()
		ctl.Close()
		return nil, fmt.Errorf("pglock: %w: %w", lock.ErrUnavailable, err)
	}
	closing, shutdown := context.WithCancel(context.Background())
	return &Locker{
		pool: pool, ctl: ctl, ttl: o.ttl,
		log: o.log.With("backend", backendName), m: m,
		closing: closing, shutdown: shutdown, closeSockets: closeSockets,
		live: make(map[*session]struct{}),
	}, nil
}

// Name implements lock.Locker.
func (l *Locker) Name() string { return backendName }

// Fenced implements lock.Locker: tokens are values of the database's
// stockguard_lock_fence sequence, drawn on the lock's connection after the
// lock is granted. A sequence never goes back, even across a crash, but a
// failover to an asynchronous replica can hand a value out twice; the store's
// lease-id check catches that.
func (l *Locker) Fenced() bool { return true }

// Ping implements lock.Locker. It uses a connection of its own, so that a
// lock pool full of waiters does not look like an outage.
func (l *Locker) Ping(ctx context.Context) error {
	ctx, stop := l.bind(ctx)
	defer stop()
	if err := l.ctl.Ping(ctx); err != nil {
		return fmt.Errorf("pglock: ping: %w: %w", lock.ErrUnavailable, err)
	}
	return nil
}

// Close implements lock.Locker. Waiting acquisitions fail with
// lock.ErrUnavailable; held leases are lost, their sessions ended, which frees
// their locks at once. Cancels left to the background (see send) end too,
// their sockets closed, before Close returns, and so do the cancel requests
// pgx sends on its own for connections it gave up.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	live := slices.Collect(maps.Keys(l.live))
	l.mu.Unlock()

	l.shutdown()
	for _, s := range live {
		s.end(fmt.Errorf("locker closed: %w", lock.ErrLeaseLost))
	}
	// shutdown made the background cancels close their sockets.
	l.cleanups.Wait()
	// Returns once every connection is back: the waits and keepalives that
	// shutdown interrupted give theirs back promptly.
	l.pool.Close()
	l.ctl.Close()
	l.closeSockets()
	return nil
}

// Acquire implements lock.Locker. The key may be any non-empty UTF-8 string
// without NUL bytes (Postgres text cannot hold those).
func (l *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	start := time.Now()
	lease, err := l.acquire(ctx, key, lock.Apply(l.ttl, opts))
	if err != nil {
		l.m.Failed(lockmetrics.Reason(err))
		return nil, fmt.Errorf("pglock: acquire %q: %w", key, err)
	}
	l.m.Acquired(time.Since(start))
	return lease, nil
}

func (l *Locker) acquire(parent context.Context, key string, o lock.Options) (*lock.Lease, error) {
	if key == "" || !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
		return nil, lock.ErrInvalidKey
	}
	if err := parent.Err(); err != nil {
		return nil, err
	}
	ctx, stop := l.bind(parent)
	defer stop()

	id := uuid.New()
	var c *pgxpool.Conn
	var token int64
	var sent time.Time
	for dead := 0; ; dead++ {
		var err error
		if c, err = l.pool.Acquire(ctx); err != nil {
			return nil, l.failure(parent, err)
		}
		// The validity is counted from before the statements were sent: the
		// server's idle timer starts only after the last one.
		sent = time.Now()
		var held bool
		if o.TryOnce {
			token, held, err = l.try(ctx, c, key, id, o.TTL)
		} else {
			token, err = l.wait(ctx, c, key, id, o.TTL)
			held = err == nil
		}
		if err == nil && !held {
			l.recycle(ctx, c)
			return nil, lock.ErrNotAcquired
		}
		if err == nil {
			break
		}
		// A session that broke during the attempt holds nothing, and after a
		// server restart every idle connection in the pool is dead (the pool
		// pings only those idle for over a second): try another. Any other
		// failure may have come as the lock was granted: discard frees it.
		closed := !abandoned(err) && c.Conn().IsClosed()
		err = l.discarding(c, err)
		if !closed || dead+1 >= maxDeadConns || ctx.Err() != nil {
			return nil, l.failure(parent, err)
		}
		l.log.Debug("dropped a dead pooled connection", "err", err)
	}
	if time.Since(sent) > o.TTL/refreshAfter {
		// A long wait ate into the validity counted from before it; restart
		// the server's timer to get the whole TTL back.
		sent = time.Now()
		if err := l.exec(ctx, c, key, keepaliveSQL); err != nil {
			return nil, l.failure(parent, l.discarding(c, err))
		}
	}
	set, err := l.grant(c, []string{key}, []uuid.UUID{id}, []int64{token}, sent, o)
	if err != nil {
		return nil, l.discarding(c, err)
	}
	return set[0], nil
}

// maxDeadConns bounds the dead pooled connections one acquisition throws away.
const maxDeadConns = 3

// try is TryOnce's single attempt. held is false when the key is locked
// elsewhere.
func (l *Locker) try(ctx context.Context, c *pgxpool.Conn, key string, id uuid.UUID, ttl time.Duration) (token int64, held bool, err error) {
	var t *int64
	b := &pgx.Batch{}
	b.Queue(tryLockSQL, key, leaseAppName(id), idleTimeout(ttl)).QueryRow(func(row pgx.Row) error { return row.Scan(nil, nil, &t) })
	if err := l.send(ctx, c, b, key); err != nil || t == nil {
		return 0, false, err
	}
	return *t, true, nil
}

// wait is a blocking acquisition: it labels the session, arms the idle
// timeout, waits in pg_advisory_lock until the lock is granted or ctx ends,
// and draws the token. The statements go in one pipeline: uncontended, that
// is one round trip, and the server draws the token as soon as it grants the
// lock, which saves the hand-off between holders a round trip.
//
// On a cancelled context pgx would close the socket and send one cancel
// request in the background; but a backend waiting for a lock does not read
// its socket, and until a cancel lands it stays queued and can be granted the
// lock, ahead of live waiters. So wait asks the server to cancel the
// statement, again until the server answers, which proves the backend has
// left the queue; only a server that does not answer gets its socket closed.
func (l *Locker) wait(ctx context.Context, c *pgxpool.Conn, key string, id uuid.UUID, ttl time.Duration) (int64, error) {
	var token int64
	b := &pgx.Batch{}
	b.Queue(lockSQL, key, leaseAppName(id), idleTimeout(ttl))
	b.Queue(nextvalSQL).QueryRow(func(row pgx.Row) error { return row.Scan(&token) })
	if err := l.send(ctx, c, b, key); err != nil {
		return 0, err
	}
	return token, nil
}

// send runs a pipeline that may wait in the server's lock queue, and when
// ctx ends first cancels it as wait describes. It returns once the backend
// has left the queue; or, when the server has not answered within
// cancelGrace, at once: the caller's context is over, and a silent server
// (a partition, a frozen host) would hold it until cancelGiveUp. The cancel
// then goes on in the background, which closes the socket when it ends,
// and the error wraps lock.ErrCleanupPending.
//
// An error wrapping lock.ErrCleanupPending means send gave c up (see
// abandoned): it is closed, or will be, and the caller must not touch it.
func (l *Locker) send(ctx context.Context, c *pgxpool.Conn, b *pgx.Batch, what string) error {
	return l.sendWithin(ctx, ctx, c, b, what)
}

// sendWithin is send with the wait bounded by bound, a child of ctx that
// may end first (AcquireAll's hold-wait bound). cancelGrace counts from the
// end of ctx, the caller's own: while ctx lasts, sendWithin waits for the
// server to answer the cancel as long as the cancel is tried (cancelGiveUp),
// since the caller means to wait on. The errors that give c up wrap ctx's
// error, never bound's: the caller did not give up.
func (l *Locker) sendWithin(ctx, bound context.Context, c *pgxpool.Conn, b *pgx.Batch, what string) error {
	qctx, abort := context.WithCancel(context.WithoutCancel(ctx))
	p := &pipeline{c: c, abort: abort, finished: make(chan struct{})}
	// The pipeline runs on a goroutine of its own so that the caller can
	// leave it to the background when the server does not answer.
	go func() {
		defer close(p.finished)
		p.err = c.SendBatch(qctx, b).Close()
	}()
	select {
	case <-p.finished:
		abort()
		if p.err == nil && bound.Err() != nil {
			return ended(ctx, bound) // granted as the wait's bound ended
		}
		return p.err
	case <-bound.Done():
		return l.cancel(ctx, bound, p, what)
	}
}

// ended is the error of a wait whose bound ended: ctx's error, the
// caller's, if it has ended too, else bound's.
func ended(ctx, bound context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return bound.Err()
}

// withCtxErr is err with ctx's error, if ctx has ended.
func withCtxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w: %w", err, cerr)
	}
	return err
}

// pipeline is a pipeline of send in flight on its connection.
type pipeline struct {
	c        *pgxpool.Conn
	abort    context.CancelFunc // makes pgx close the socket, which ends the pipeline
	finished chan struct{}      // closed once the pipeline has ended, with err
	err      error
	aborted  error        // why the cancel loop closed the socket instead, if it did
	owner    atomic.Int32 // who ends the connection once the cancel loop ends
}

// The owners of a cancelled pipeline's connection: the caller until it
// leaves, then the background cancel loop, which closes it. Whichever of
// the caller leaving and the loop ending comes first decides.
const (
	ownerUndecided int32 = iota
	ownerCaller
	ownerBackground
)

// cancel has the server cancel p, whose bound ended while it ran. The
// cancel loop runs in the background: the caller waits for it to end as
// long as ctx lasts and at most cancelGrace past its end, then leaves the
// connection to it.
func (l *Locker) cancel(ctx, bound context.Context, p *pipeline, what string) error {
	stopped := make(chan struct{})
	if !l.background(func() {
		defer close(stopped)
		l.cancelLoop(p, what)
		// Ended before the caller left, the pipeline is the caller's to
		// finish; after, its session may hold or wait for keys: end it.
		if !p.owner.CompareAndSwap(ownerUndecided, ownerCaller) {
			destroy(p.c)
		}
	}) {
		// Close has begun, and ends every session: this one too, at once.
		p.abort()
		<-p.finished
		destroy(p.c)
		return withCtxErr(ctx, fmt.Errorf("%w: the locker closed during the statement, socket closed", lock.ErrCleanupPending))
	}
	// The loop ends once the pipeline has ended and no cancel request is in
	// flight: a request still on its way could cancel the connection's next
	// statement, so a finished pipeline waits for it too, within the grace,
	// and past it leaves the connection to the loop all the same.
	callerDone := ctx.Done()
	var grace <-chan time.Time
	for stopped != nil {
		select {
		case <-stopped:
			stopped = nil
		case <-callerDone:
			callerDone, grace = nil, time.After(cancelGrace)
		case <-grace:
			if p.owner.CompareAndSwap(ownerUndecided, ownerBackground) {
				return fmt.Errorf("%w: the cancel not settled %v after the context ended; it goes on in the background, then the socket is closed: %w",
					lock.ErrCleanupPending, cancelGrace, ctx.Err())
			}
			grace = nil // the loop has just ended: the connection is ours
		}
	}
	if p.aborted != nil {
		destroy(p.c)
		return withCtxErr(ctx, fmt.Errorf("%w: %w, socket closed", lock.ErrCleanupPending, p.aborted))
	}
	if p.err == nil {
		return ended(ctx, bound) // granted as the wait's bound ended
	}
	return p.err
}

// cancelLoop sends cancel requests for p every cancelRetry until p ends.
// After cancelGiveUp, or when the Locker closes, it makes pgx close the
// socket instead. It returns once p has ended and no request is in flight.
func (l *Locker) cancelLoop(p *pipeline, what string) {
	giveUp := time.NewTimer(cancelGiveUp)
	defer giveUp.Stop()
	pg := p.c.Conn().PgConn()
	for {
		select {
		case <-p.finished:
			return
		default:
		}
		// Close ends the loop, a request in flight too.
		cctx, cancel := context.WithTimeout(l.closing, time.Second)
		_ = pg.CancelRequest(cctx) // a failure here is retried, then the socket closed
		cancel()
		select {
		case <-p.finished:
			return
		case <-giveUp.C:
			l.log.Warn("lock wait not cancelled by the server; closing its connection", "key", what)
			p.aborted = fmt.Errorf("no answer to the cancel in %v", cancelGiveUp)
		case <-l.closing.Done():
			p.aborted = errors.New("the locker closed before the cancel was answered")
		case <-time.After(cancelRetry):
			continue
		}
		p.abort()
		<-p.finished
		return
	}
}

// background runs f on a goroutine Close waits for, unless Close has begun.
func (l *Locker) background(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.cleanups.Add(1)
	go func() {
		defer l.cleanups.Done()
		f()
	}()
	return true
}

// abandoned reports whether send gave its connection up with err (see
// send): only the clean-up it left behind may touch it.
func abandoned(err error) bool { return errors.Is(err, lock.ErrCleanupPending) }

// exec runs one statement of an acquisition as send runs a pipeline.
func (l *Locker) exec(ctx context.Context, c *pgxpool.Conn, what, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return l.send(ctx, c, b, what)
}

// discard ends an acquisition's hold on c after a failure, which may have
// come just as a lock was granted. A working connection gets one statement
// that frees every lock of its session and undoes the lease's settings, and
// goes back to the pool: the keys are free for anyone the moment the
// acquisition returns, as a cancelled acquisition promises. Closing the
// socket would free them too, but only once the server notices, a moment
// later; discard does that only for a connection that is broken already or
// does not answer.
//
// The error, lock.ErrCleanupPending, is for a connection that was open and
// did not answer: its session may hold locks until the server notices the
// closed socket. One already closed (broken) holds nothing that its closing
// did not already say.
func (l *Locker) discard(c *pgxpool.Conn) error {
	if c.Conn().IsClosed() {
		destroy(c)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	_, err := c.Exec(ctx, unlockAllSQL, poolAppName)
	cancel()
	if err == nil {
		c.Release()
		return nil
	}
	destroy(c)
	return fmt.Errorf("%w: unlock not answered in %v, socket closed: %w", lock.ErrCleanupPending, discardTimeout, err)
}

// discarding discards c after err and returns err, with the discard's
// error if it left something behind. A connection send gave up with err is
// no longer the caller's to discard.
func (l *Locker) discarding(c *pgxpool.Conn, err error) error {
	if abandoned(err) {
		return err
	}
	if derr := l.discard(c); derr != nil {
		return fmt.Errorf("%w (%w)", err, derr)
	}
	return err
}

// recycle hands a connection that holds no lock back to the pool, with the
// lease's settings undone.
func (l *Locker) recycle(ctx context.Context, c *pgxpool.Conn) {
	if _, err := c.Exec(ctx, resetSQL, poolAppName); err != nil {
		destroy(c)
		return
	}
	c.Release()
}

// failure turns an acquisition error into the caller's context error when
// the caller gave up, or lock.ErrUnavailable.
func (l *Locker) failure(parent context.Context, err error) error {
	if perr := parent.Err(); perr != nil {
		if errors.Is(err, lock.ErrCleanupPending) {
			return fmt.Errorf("%w (%w)", perr, err)
		}
		return perr
	}
	if l.closing.Err() != nil {
		return errClosed
	}
	if errors.Is(err, lock.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", lock.ErrUnavailable, err)
}

// bind returns a child of ctx that Close cancels too.
func (l *Locker) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.closing, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// closeWith wraps dial so that every socket it opens is closed once ctx
// ends. pgx closes a connection it gave up (a statement failed or was
// aborted) only after a cancel request of its own, on a socket of its own
// that a silent server holds for up to 15 s; Close ends those too.
func closeWith(ctx context.Context, dial pgconn.DialFunc) pgconn.DialFunc {
	return func(dctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(dctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &closingConn{Conn: conn, stop: context.AfterFunc(ctx, func() { _ = conn.Close() })}, nil
	}
}

// closingConn is a socket of closeWith.
type closingConn struct {
	net.Conn
	stop func() bool
}

func (c *closingConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

func (l *Locker) forget(s *session) {
	l.mu.Lock()
	delete(l.live, s)
	l.mu.Unlock()
}

// validUntil is a lease's deadline when the server's idle timer started no
// earlier than sent. The server times the TTL on its own clock, so the
// deadline keeps Redlock's allowance for clock drift (1% of the TTL plus
// 2 ms): the lease must end on our side before the server can free the lock.
func validUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - ttl/100 - 2*time.Millisecond)
}

func leaseAppName(id uuid.UUID) string { return leaseAppPrefix + id.String() }

// idleTimeout renders a TTL as an idle_session_timeout value. It rounds up to
// a whole millisecond: rounding down could end the session before the lease's
// deadline, and 0 would disable the timeout.
func idleTimeout(ttl time.Duration) string {
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	ms = min(max(ms, 1), 1<<31-1) // the setting is an int of milliseconds
	return strconv.FormatInt(int64(ms), 10) + "ms"
}

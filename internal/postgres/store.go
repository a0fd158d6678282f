// Package postgres is the inventory.Store on PostgreSQL through gorm. Every
// SKU write is fenced by the lease's token and id; see Claim and Write.
package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/stockguard/stockguard/internal/inventory"
)

// Store implements inventory.Store.
type Store struct {
	db      *gorm.DB
	sqlDB   *sql.DB
	fencing bool
	// The hot statements, numbered for pgx (see pgx.go).
	claimPgx, readPgx, writePgx string
	// migrated turns true once Ping found every migration applied; a
	// schema never goes back, so later pings only ping.
	migrated atomic.Bool
}

// Option configures a Store.
type Option func(*config)

type config struct {
	fencing  bool
	maxConns int
	log      *slog.Logger
	tracer   trace.TracerProvider
}

// WithFencing turns the fence condition on writes on or off. Default on; off
// exists only to demonstrate the damage a paused lock holder does.
func WithFencing(on bool) Option { return func(c *config) { c.fencing = on } }

// DefaultMaxConns is the pool size per instance. A hot SKU needs one
// connection per batch leader at a time; 16 also keeps the hot-row ceiling
// measurement's parallelism. Three instances then use 48 connections, which
// leaves room under a stock max_connections of 100 for the postgres lock
// backend's sessions and for tools.
const DefaultMaxConns = 16

// WithMaxConns sizes the connection pool. Default DefaultMaxConns.
func WithMaxConns(n int) Option { return func(c *config) { c.maxConns = n } }

// WithLogger logs slow queries and errors. Default: silent.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// Open connects to the database at url.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	c := config{fencing: true, maxConns: DefaultMaxConns}
	for _, o := range opts {
		o(&c)
	}
	gl := logger.Discard
	if c.log != nil {
		// gorm's messages are printf-style: give it a log.Logger over the
		// slog handler rather than its structured adapter, which mangles them.
		gl = logger.New(slog.NewLogLogger(c.log.Handler(), slog.LevelWarn), logger.Config{
			SlowThreshold: 500 * time.Millisecond, LogLevel: logger.Warn, IgnoreRecordNotFoundError: true})
	}
	db, err := gorm.Open(dialector(url, c), &gorm.Config{
		// Each statement we send is either alone (and autocommits) or inside
		// an explicit transaction; gorm's implicit one would only add round trips.
		SkipDefaultTransaction: true,
		// No gorm statement cache: its callers of one query wait for the
		// first one's prepare without their own context and share its error
		// (a client gone failed another's request as a 499). pgx's driver
		// already caches prepared statements per connection.
		PrepareStmt: false,
		Logger:      gl,
		// gorm's ping takes no context: against a server that accepts the
		// connection and never answers it would block Open, and a start
		// stopped by SIGTERM, for good. The ping below honours ctx.
		DisableAutomaticPing: true,
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	sqlDB.SetMaxOpenConns(c.maxConns)
	sqlDB.SetMaxIdleConns(c.maxConns)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	st := &Store{db: db, sqlDB: sqlDB, fencing: c.fencing, claimPgx: numbered(claimSQL), readPgx: numbered(readSQL)}
	_, st.writePgx = writeStatements(c.fencing)
	return st, nil
}

// randomPageCost is set on every connection the store opens, unless its URL
// sets random_page_cost (as a parameter or in its options, see setsParam).
// The default (4) prices an index probe for a spinning disk, and on a skus
// table of a thousand rows the planner then answers a batch's claim and
// write — a handful of rows by primary key, joined to the unnest of their
// arrays — with a hash join over a sequential scan of the whole table
// (EXPLAIN ANALYZE of a 10-row claim: 0.35–0.46 ms); at 1.1, the usual
// figure for data in memory or on SSD, with a nested loop of index probes
// (0.13 ms). The session's setting wins over the server's (postgresql.conf,
// ALTER DATABASE or ROLE ... SET); a URL that sets random_page_cost keeps
// its own.
const randomPageCost = "1.1"

// statementTimeout is set on every connection the store opens, unless its
// URL sets statement_timeout (as a parameter or in its options, see
// setsParam). It wins over the server's settings (postgresql.conf, ALTER
// DATABASE or ROLE ... SET), which are made for the role's or database's
// other users and know nothing of the bound below. The server ends a
// statement that runs longer with query_canceled, and so says that nothing
// was written. It is below the service's bound on each store call under the
// leases (reservation's storeTimeout, 10 s), so that a write stuck on a row
// lock or a slow disk is ended by the server, which knows its outcome,
// before the client gives up on it, which does not; and it bounds how long a
// write whose answer was lost (inventory.ErrOutcomeUnknown) can still
// commit. Migrations run without it (Migrate).
const statementTimeout = "8s"

// connectTimeout bounds each attempt to connect, unless the URL (or
// PGCONNECT_TIMEOUT) sets a connect_timeout other than 0. A caller's
// context bounds its own attempts, but database/sql also connects in the
// background, for callers queued on a full pool, with no deadline at all:
// against a server that accepts connections and never answers (a stuck
// postmaster, a proxy with no backend) each such attempt would hold one of
// the pool's connections for good. No caller waits longer than the
// service's bound on a store call (reservation's storeTimeout, 10 s), so an
// attempt that outlasts it serves no one. A connect_timeout of 0 (libpq's
// "wait forever") counts as unset: pgx's config does not tell the two
// apart. A var for the tests.
var connectTimeout = 10 * time.Second

// cancelDelay is how long a statement whose context ended has to answer
// the cancel request sent for it before its connection is closed.
const cancelDelay = time.Second

// cancelRequests handles a context that ends while a statement runs by
// asking the server to cancel it (pgx's cancel request, on a connection of
// its own) and waiting up to cancelDelay for the answer. pgx's default
// instead closes the socket at once: the server, not reading it, carries on
// and may commit what the caller was told had failed, and the pool loses
// the connection. Cancelled on the server, the statement answers
// query_canceled (nothing written; translate keeps the context's error) or,
// if it finished first, its result; either way the connection stays
// usable. Only with no answer in cancelDelay is it closed, and the outcome
// unknown (unanswered).
func cancelRequests(pc *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: cancelDelay}
}

// dialector is gorm's driver over pgx, with randomPageCost,
// statementTimeout, connectTimeout, cancelRequests and, when the store has a
// tracer provider, a pgx tracer: all are part of each connection's config,
// set before it connects, so gorm's statements and the hot path's alike have
// them (database/sql's connector passes the config to pgx.ConnectConfig as
// it is).
func dialector(url string, c config) gorm.Dialector {
	var tracer *queryTracer
	if c.tracer != nil {
		tracer = newQueryTracer(c.tracer, c.fencing)
	}
	return postgres.New(postgres.Config{DSN: url, OptionOpenDB: []stdlib.OptionOpenDB{
		stdlib.OptionBeforeConnect(func(_ context.Context, cc *pgx.ConnConfig) error {
			// cc is a shallow copy: its map is every connection's, and
			// connections open concurrently.
			params := make(map[string]string, len(cc.RuntimeParams)+2)
			maps.Copy(params, cc.RuntimeParams)
			cc.RuntimeParams = params
			if !setsParam(cc.RuntimeParams, "random_page_cost") {
				cc.RuntimeParams["random_page_cost"] = randomPageCost
			}
			if !setsParam(cc.RuntimeParams, "statement_timeout") {
				cc.RuntimeParams["statement_timeout"] = statementTimeout
			}
			if cc.ConnectTimeout == 0 {
				cc.ConnectTimeout = connectTimeout
			}
			cc.BuildContextWatcherHandler = cancelRequests
			if tracer != nil {
				cc.Tracer = tracer
			}
			return nil
		})}})
}

// setsParam reports whether a connection's startup parameters set the
// server parameter name (lower case), as one of their own or in options
// (libpq's, also read from PGOPTIONS). Both beat the server's settings, and
// a default sent alongside as a parameter of its own would beat options.
// The server matches parameter names in any case.
func setsParam(params map[string]string, name string) bool {
	for k := range params {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return optionsSet(params["options"], name)
}

// optionsSet reports whether options, which the server reads as the
// command-line switches of the session's backend, set the parameter name:
// "-c name=value", "-cname=value" or "--name=value", the name in any case
// and with dashes for underscores.
func optionsSet(options, name string) bool {
	args := splitOptions(options)
	for i := 0; i < len(args); i++ {
		var setting string
		switch a := args[i]; {
		case a == "-c" && i+1 < len(args):
			i++
			setting = args[i]
		case strings.HasPrefix(a, "--"), strings.HasPrefix(a, "-c"):
			setting = a[2:]
		default:
			continue
		}
		n, _, ok := strings.Cut(setting, "=")
		if ok && strings.EqualFold(strings.ReplaceAll(n, "-", "_"), name) {
			return true
		}
	}
	return false
}

// splitOptions splits options into switches as the server does
// (pg_split_opts): at white space, a backslash escaping the next byte.
func splitOptions(options string) []string {
	var args []string
	var arg strings.Builder
	inArg, escaped := false, false
	for i := 0; i < len(options); i++ {
		b := options[i]
		switch {
		case escaped:
			escaped = false
		case b == '\\':
			escaped, inArg = true, true
			continue
		case strings.IndexByte(" \t\n\v\f\r", b) >= 0:
			if inArg {
				args = append(args, arg.String())
				arg.Reset()
				inArg = false
			}
			continue
		}
		arg.WriteByte(b)
		inArg = true
	}
	if inArg {
		args = append(args, arg.String())
	}
	return args
}

// DB is the underlying database handle (for migrations).
func (s *Store) DB() *sql.DB { return s.sqlDB }

// Close closes the pool.
func (s *Store) Close() error { return s.sqlDB.Close() }

// Ping implements inventory.Store: the database answers and every
// migration is applied (an instance started with --migrate=false before
// its migration job ran is not ready).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	if s.migrated.Load() {
		return nil
	}
	if err := checkMigrated(ctx, s.sqlDB); err != nil {
		return err
	}
	s.migrated.Store(true)
	return nil
}

// SKU implements inventory.Store.
func (s *Store) SKU(ctx context.Context, sku string) (inventory.SKU, error) {
	var rows []skuRow
	err := s.db.WithContext(ctx).Raw(`SELECT sku, available, reserved, sold, received, fence_token, updated_at
		FROM skus WHERE sku = ?`, sku).Scan(&rows).Error
	if err != nil {
		return inventory.SKU{}, translate(ctx, "get sku", err)
	}
	if len(rows) == 0 {
		return inventory.SKU{}, &inventory.SKUError{SKU: sku, Err: inventory.ErrUnknownSKU}
	}
	return rows[0].domain(), nil
}

// Audit implements inventory.Store: held and sold are summed from the order
// lines, never read from the counters they are meant to check.
func (s *Store) Audit(ctx context.Context, sku string) (inventory.Audit, error) {
	var rows []struct {
		Received, Available, Held, Sold int64
	}
	err := s.db.WithContext(ctx).Raw(`SELECT s.received, s.available,
			COALESCE(SUM(l.quantity) FILTER (WHERE o.status = 'reserved'), 0) AS held,
			COALESCE(SUM(l.quantity) FILTER (WHERE o.status = 'confirmed'), 0) AS sold
		FROM skus s
		LEFT JOIN order_lines l ON l.sku = s.sku
		LEFT JOIN orders o ON o.id = l.order_id
		WHERE s.sku = ?
		GROUP BY s.sku, s.received, s.available`, sku).Scan(&rows).Error
	if err != nil {
		return inventory.Audit{}, translate(ctx, "audit", err)
	}
	if len(rows) == 0 {
		return inventory.Audit{}, &inventory.SKUError{SKU: sku, Err: inventory.ErrUnknownSKU}
	}
	r := rows[0]
	return inventory.NewAudit(sku, r.Received, r.Held, r.Sold, r.Available), nil
}

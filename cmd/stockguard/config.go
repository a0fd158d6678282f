package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/cliflag"
	"github.com/stockguard/stockguard/internal/lock/backends"
	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/reservation"
)

// envPrefix names the variables of serve's and migrate's flags:
// STOCKGUARD_<FLAG>, dashes as underscores.
const envPrefix = "STOCKGUARD_"

// defaultDatabaseURL is the local stack's database.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5433/stockguard?sslmode=disable"

// The lock backend's health probe: a Ping every lockProbeInterval, each
// bounded by lockProbeTimeout so a partitioned server cannot stall /readyz.
const (
	lockProbeInterval = 5 * time.Second
	lockProbeTimeout  = 2 * time.Second
)

// config is every serve/migrate setting.
type config struct {
	addr          string
	lock          string
	fencing       string
	lockTTL       time.Duration
	lockWait      time.Duration
	redisAddrs    string
	zkServers     string
	etcdEndpoints string
	databaseURL   string
	adminToken    string
	chaos         bool
	logLevel      string
	level         slog.Level // logLevel, parsed by validate
	reapInterval  time.Duration
	dbMaxConns    int
	coalesce      string
	coalesceCfg   reservation.Coalescing
	// window is --coalesce-window as given: auto or a duration.
	window    string
	limits    serverLimits
	migrate   bool
	debugAddr string
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "listen address")
	fs.StringVar(&c.lock, "lock", "redlock", "lock backend: "+strings.Join(backends.Names(), ", "))
	fs.StringVar(&c.fencing, "fencing", "on", "fence writes with the lease token: on or off (none and local always run off)")
	fs.DurationVar(&c.lockTTL, "lock-ttl", 10*time.Second,
		"lease TTL for expiring backends (redis, redlock, postgres idle timeout, etcd session lease in whole seconds), 100ms to 24h")
	fs.DurationVar(&c.lockWait, "lock-wait", 5*time.Second, "how long a request waits for its locks before 503 lock_unavailable, at most 24h")
	fs.StringVar(&c.redisAddrs, "redis-addrs", "127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393,127.0.0.1:6394,127.0.0.1:6395",
		"comma-separated Redis masters (redis uses the first)")
	fs.StringVar(&c.zkServers, "zk-servers", "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183", "comma-separated ZooKeeper servers")
	fs.StringVar(&c.etcdEndpoints, "etcd-endpoints", "127.0.0.1:2379,127.0.0.1:2479,127.0.0.1:2579",
		"comma-separated etcd members' client addresses")
	fs.StringVar(&c.databaseURL, "database-url", defaultDatabaseURL, "PostgreSQL URL")
	fs.StringVar(&c.adminToken, "admin-token", "", "bearer token required for PUT /v1/skus (empty: no check)")
	fs.BoolVar(&c.chaos, "chaos", false, "honour the X-Chaos-Pause and X-Chaos-Stall test headers")
	fs.StringVar(&c.logLevel, "log-level", "info",
		"debug, info, warn or error (JSON lines on stderr; go-redis's and OpenTelemetry's messages at warn, each kind at most once every 30s)")
	fs.DurationVar(&c.reapInterval, "reap-interval", time.Second, "how often expired holds are returned to stock")
	fs.IntVar(&c.dbMaxConns, "db-max-conns", postgres.DefaultMaxConns, "database connection pool size per instance")
	fs.StringVar(&c.coalesce, "coalesce", "on", "batch concurrent orders, of any SKUs or of one hot SKU, under one acquisition and one transaction: on or off")
	fs.IntVar(&c.coalesceCfg.Gatherers, "coalesce-gatherers", reservation.DefaultGatherers, "gathered batches (orders of any SKUs) an instance runs at once")
	fs.IntVar(&c.coalesceCfg.MaxBatch, "coalesce-max-batch", reservation.DefaultMaxBatch, "most orders in one coalesced batch")
	fs.IntVar(&c.coalesceCfg.MaxBatches, "coalesce-max-batches", reservation.DefaultMaxBatches,
		"most batches run under one lock acquisition before other instances get their turn")
	fs.DurationVar(&c.coalesceCfg.MaxHold, "coalesce-max-hold", reservation.DefaultMaxHold,
		"longest a batch leader keeps its leases for further batches")
	fs.StringVar(&c.window, "coalesce-window", "auto",
		"shortest time between the starts of two gathered batches while orders wait behind them: a duration up to 100ms (0: none), or auto: 12ms with --lock=redlock, redis or postgres, none with the others")
	c.limits.register(fs)
	fs.BoolVar(&c.migrate, "migrate", true, "apply pending migrations at start (false: a migration job owns the schema)")
	fs.StringVar(&c.debugAddr, "debug-addr", "", "serve net/http/pprof on this loopback address, e.g. 127.0.0.1:6060 (empty: off); /debug/pprof/cmdline is not served, as the command line may hold secrets")
}

func (c *config) validate() error {
	var err error
	if _, err = backends.Lookup(c.lock); err != nil {
		return badValue("lock", c.lock, err)
	}
	if err := c.level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return badValue("log-level", c.logLevel, errors.New("want debug, info, warn or error"))
	}
	if c.fencing != "on" && c.fencing != "off" {
		return badValue("fencing", c.fencing, errors.New("want on or off"))
	}
	if c.coalesce != "on" && c.coalesce != "off" {
		return badValue("coalesce", c.coalesce, errors.New("want on or off"))
	}
	c.coalesceCfg.Disabled = c.coalesce == "off"
	for _, n := range []struct {
		flag string
		v    int
	}{{"coalesce-max-batch", c.coalesceCfg.MaxBatch}, {"coalesce-max-batches", c.coalesceCfg.MaxBatches}, {"coalesce-gatherers", c.coalesceCfg.Gatherers}} {
		if n.v < 1 {
			return badValue(n.flag, strconv.Itoa(n.v), errors.New("want at least 1"))
		}
	}
	if c.coalesceCfg.MaxHold <= 0 {
		return badValue("coalesce-max-hold", c.coalesceCfg.MaxHold.String(), errors.New("want a duration above 0"))
	}
	if c.coalesceCfg.Window, err = parseWindow(c.window, c.lock); err != nil {
		return badValue("coalesce-window", c.window, err)
	}
	if c.lockTTL < 100*time.Millisecond {
		return badValue("lock-ttl", c.lockTTL.String(), errors.New("want at least 100ms"))
	}
	if err := positive(map[string]time.Duration{"lock-wait": c.lockWait, "reap-interval": c.reapInterval}); err != nil {
		return err
	}
	if err := notAbove(durationCeiling, map[string]time.Duration{"lock-ttl": c.lockTTL, "lock-wait": c.lockWait}); err != nil {
		return err
	}
	// database/sql reads 0 or less as no limit at all.
	if c.dbMaxConns < 1 {
		return badValue("db-max-conns", strconv.Itoa(c.dbMaxConns), errors.New("want at least 1"))
	}
	if err := checkDebugAddr(c.debugAddr); err != nil {
		return err
	}
	// Go's server trims header values, so no client could ever send a
	// token with spaces or a newline around it (a Secret made from a file
	// often ends with one): every PUT would be 401. Not echoed: a secret.
	if c.adminToken != strings.TrimSpace(c.adminToken) {
		return fmt.Errorf("%w: --admin-token (%s) has leading or trailing whitespace (a newline from a file?), which no client can send", errUsage, cliflag.EnvName(envPrefix, "admin-token"))
	}
	if err := c.limits.validate(); err != nil {
		return err
	}
	return c.checkAddrs()
}

// logger is the service's JSON logger at --log-level (checked by validate).
func (c *config) logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: c.level}))
}

// positive checks that each flag's duration is above 0, in the order of
// the flags' names so that the error does not depend on the map's.
func positive(flags map[string]time.Duration) error {
	for _, name := range slices.Sorted(maps.Keys(flags)) {
		if d := flags[name]; d <= 0 {
			return badValue(name, d.String(), errors.New("want a duration above 0"))
		}
	}
	return nil
}

// notAbove checks that each flag's duration is at most ceiling, in the
// order of the flags' names as positive does.
func notAbove(ceiling time.Duration, flags map[string]time.Duration) error {
	for _, name := range slices.Sorted(maps.Keys(flags)) {
		if d := flags[name]; d > ceiling {
			return badValue(name, d.String(), fmt.Errorf("want at most %s", ceiling))
		}
	}
	return nil
}

// autoWindow is --coalesce-window=auto's window on redlock, redis and
// postgres. The window trades an order's wait for fewer, fuller batches,
// which pays where a batch's own cost (a script call per master per phase,
// two commits) is what the machine spends; and since a gatherer stops
// waiting once the intake holds as many orders as its last batch, it no
// longer idles an instance whose clients are back. Vegeta, load bench
// --quick, two alternated pairs each: redlock 4,621 / 4,623 → 6,343 / 6,409
// orders/s on 1,000 SKUs without / with the fill rule; with the rule,
// none / 12 ms on postgres 6,562 / 6,615 → 7,368 / 7,422 (CPU an order
// 272 / 261 → 218 / 218 µs) and redis 6,935 / 6,409 → 6,641 / 7,116 (266 /
// 273 → 240 / 234 µs). ZooKeeper hands a batch's leases to the next try
// (lock.Handover), which never waits: its window cost 3,686 / 3,433 →
// 3,289 / 3,316, so none there.
const autoWindow = 12 * time.Millisecond

// parseWindow reads --coalesce-window: auto (the backend's), or a duration
// from 0 (none) to reservation.MaxWindow.
func parseWindow(v, backend string) (time.Duration, error) {
	if v == "auto" {
		switch backend {
		case "redlock", "redis", "postgres":
			return autoWindow, nil
		}
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("want auto or a duration: %w", err)
	}
	if d < 0 || d > reservation.MaxWindow {
		return 0, fmt.Errorf("want auto or 0 to %s", reservation.MaxWindow)
	}
	return d, nil
}

package pglock

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	defaultTTL      = 10 * time.Second
	defaultMaxConns = 64
)

type options struct {
	ttl      time.Duration
	maxConns int32
	reg      prometheus.Registerer
	log      *slog.Logger
}

// Option configures a Locker.
type Option func(*options)

// WithTTL sets the TTL of leases acquired without lock.WithTTL: the idle time
// after which the server ends a silent holder's session, and with it the
// lock. Default: 10s.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithMaxConns bounds the Locker's pool of lock connections. Every
// acquisition holds one connection for as long as it waits or any of its
// leases lasts — a lone Acquire for its one key, a batch or a multi-key
// AcquireAll for all its keys — so this is also the most acquisitions one
// instance can hold or wait for at once; one beyond it waits for a
// connection (within its context). Pool settings in the
// database URL (pool_max_conns) do not apply: the URL is shared with the store.
// Default: 64.
func WithMaxConns(n int) Option { return func(o *options) { o.maxConns = int32(n) } }

// WithRegisterer registers the Locker's metrics on reg. Lockers sharing a
// registry share the collectors. Default: nil, metrics are not exported.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithLogger sets the logger for lost leases and abandoned connections.
// Default: a logger that discards everything.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

package etcdlock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the options.
const (
	DefaultSessionTTL  = 5 * time.Second
	DefaultDialTimeout = 5 * time.Second
)

// Root is the prefix of every lock key: a key's waiters live under
// Root/<key>/, the names other tools rely on (DESIGN "Names others rely on").
const Root = "/stockguard/locks"

// pingTimeout bounds Ping when its context has no earlier deadline: a
// readiness probe must answer, and a quorum read on loopback takes a
// millisecond.
const pingTimeout = 2 * time.Second

type config struct {
	sessionTTL  time.Duration
	dialTimeout time.Duration
	reg         prometheus.Registerer
	log         *slog.Logger
}

// Option configures a Locker.
type Option func(*config)

// WithSessionTTL sets the TTL of the session's etcd lease. Default: 5s. etcd
// counts whole seconds, so it is rounded up, and the servers raise it to
// their minimum (1.5 election timeouts). Every lease of the Locker lives in
// that one session, so this is also how long a dead holder blocks its keys.
func WithSessionTTL(d time.Duration) Option {
	return func(c *config) { c.sessionTTL = d }
}

// WithDialTimeout bounds how long opening a connection to an endpoint, and
// opening a session (granting its lease), may take when the caller's context
// has no earlier deadline. Default: 5s.
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) { c.dialTimeout = d }
}

// WithRegisterer registers the Locker's metrics on reg. Default: nil, the
// metrics are kept but exported nowhere. Several Lockers may share one
// registry; they then share the collectors.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) { c.reg = reg }
}

// WithLogger sets where session changes (opened, lost) and abandoned clean-ups
// go. Default: nowhere. The etcd client's own log is discarded.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.log = l }
}

func newConfig(opts []Option) (config, error) {
	c := config{
		sessionTTL:  DefaultSessionTTL,
		dialTimeout: DefaultDialTimeout,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.sessionTTL <= 0 {
		return c, fmt.Errorf("etcd: session TTL %v is not positive", c.sessionTTL)
	}
	if c.dialTimeout <= 0 {
		return c, fmt.Errorf("etcd: dial timeout %v is not positive", c.dialTimeout)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// ttlSeconds is the session TTL as etcd takes it: whole seconds, rounded up.
func (c config) ttlSeconds() int64 {
	return int64((c.sessionTTL + time.Second - 1) / time.Second)
}

package redislock

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults, as the option doc comments state them.
const (
	// DefaultTTL is the lease TTL without WithTTL.
	DefaultTTL = 10 * time.Second
	// DefaultNodeTimeout bounds each request without WithNodeTimeout.
	DefaultNodeTimeout = 200 * time.Millisecond
	// DefaultRetryDelay is the mean pause between attempts without WithRetryDelay.
	DefaultRetryDelay = 10 * time.Millisecond
)

// Option configures a Locker.
type Option func(*config)

type config struct {
	ttl         time.Duration
	nodeTimeout time.Duration
	retryDelay  time.Duration
	reg         prometheus.Registerer
	log         *slog.Logger
}

func newConfig(opts []Option) config {
	c := config{ttl: DefaultTTL, nodeTimeout: DefaultNodeTimeout, retryDelay: DefaultRetryDelay}
	for _, o := range opts {
		o(&c)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// WithTTL sets the lease TTL used when Acquire is not given lock.WithTTL.
// Default: 10s. The watchdog extends a lease every TTL/3, so the TTL is also
// how long a crashed holder blocks the key.
func WithTTL(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.ttl = d
		}
	}
}

// WithNodeTimeout bounds every request to Redis (acquire, extend, release,
// ping) and the dial of a new connection. Default: 200ms — long enough for a
// loaded server, short enough that a dead one is reported (as
// lock.ErrUnavailable) well within an HTTP request's budget.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.nodeTimeout = d
		}
	}
}

// WithRetryDelay sets the mean pause between attempts while the key is held;
// each pause is drawn uniformly from [d/2, 3d/2) so that waiters that lost
// together do not all come back together. A waiter blocks for a wake-up for
// up to retry.AwaitSpan such pauses, and a release of the key ends the
// wait of the one blocked longest in its current pause (node.AwaitRelease:
// not a line across Lockers); what the
// delay sets is how soon a key is noticed free when no release comes (a
// holder that died, a lease left to expire) and the pace of attempts
// where no wake-up can be awaited. Default: 10ms.
func WithRetryDelay(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.retryDelay = d
		}
	}
}

// WithRegisterer registers the Locker's metrics (stockguard_lock_*, label
// backend="redis") on reg. Default: none; the metrics are kept but not
// exported. Several Lockers may share one registry.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) { c.reg = reg }
}

// WithLogger sets where the Locker logs retries (debug), failed clean-ups
// and lost leases (warn). Default: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.log = l }
}

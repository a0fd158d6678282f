package redlock

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults, as the option doc comments state them.
const (
	// DefaultTTL is the lease TTL without WithTTL.
	DefaultTTL = 10 * time.Second
	// DefaultNodeTimeout bounds each request to a node without WithNodeTimeout.
	DefaultNodeTimeout = 50 * time.Millisecond
	// DefaultRetryDelay is the mean pause between attempts without WithRetryDelay.
	DefaultRetryDelay = 10 * time.Millisecond
)

// Option configures a Locker.
type Option func(*config)

type config struct {
	ttl         time.Duration
	nodeTimeout time.Duration
	retryDelay  time.Duration
	noFencing   bool
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

// WithNodeTimeout bounds every request to one node (and the dial of a new
// connection to it). Default: 50ms. The Redlock paper asks for a timeout
// small against the TTL, so that a dead node costs an attempt little of the
// lease's validity; a local node answers in well under a millisecond.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.nodeTimeout = d
		}
	}
}

// WithRetryDelay sets the mean pause between attempts while the key is held;
// each pause is drawn uniformly from [d/2, 3d/2), so that clients that split
// the nodes between them in one attempt do not collide again in the next.
// A waiter blocks for a wake-up for up to retry.AwaitSpan such pauses, and a
// release of the key ends the wait of the one blocked longest in its
// current pause (see the package doc: not a line across Lockers); what the delay sets is how soon a key is noticed free
// when no release comes (a holder that died, a lease left to expire) and
// the pace of attempts where no wake-up can be awaited.
// Default: 10ms.
func WithRetryDelay(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.retryDelay = d
		}
	}
}

// WithRegisterer registers the Locker's metrics (stockguard_lock_*, label
// backend="redlock") on reg. Default: none; the metrics are kept but not
// exported. Several Lockers may share one registry.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) { c.reg = reg }
}

// WithLogger sets where the Locker logs retries and per-node release
// failures (debug; with a node down every release fails there) and lost
// leases (warn). Default: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.log = l }
}

// WithoutFencing drops the fencing token: round 1 is a plain SET NX PX and
// there is no round 2, so leases carry token 0 and Fenced reports false.
// Default: fencing on. It exists to measure what the token costs against
// libraries that have none (bench/redsync); a service must not use it, since
// without the token nothing stops a paused holder's late write.
func WithoutFencing() Option {
	return func(c *config) { c.noFencing = true }
}

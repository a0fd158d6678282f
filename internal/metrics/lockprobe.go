package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
)

// LockHealth is the lock backend's health as /readyz reports it.
type LockHealth struct {
	Backend string `json:"backend"`
	Healthy bool   `json:"healthy"`
	// Reason is why the ping failed, in words that name no server: /readyz
	// answers anyone, and a ping's error names every lock node's address.
	Reason string `json:"error,omitempty"`
	// Error is the ping's error whole, for the log only.
	Error string `json:"-"`
	// CheckedAt is when the ping answered, or gave up.
	CheckedAt time.Time `json:"checked_at,omitzero"`
}

// LockProbe pings the lock backend and publishes the answer as
// stockguard_lock_backend_up{backend}. A lock outage is reported, not
// turned into unreadiness: every replica shares the lock servers, so
// pulling replicas out of rotation would take the reads down with them.
type LockProbe struct {
	backend string
	ping    func(context.Context) error
	timeout time.Duration
	up      prometheus.Gauge

	mu sync.Mutex
	// inflight is the check running now, nil when none is: callers that
	// come while it runs share its answer instead of queueing behind it,
	// so any number of concurrent /readyz waits at most one timeout (a
	// slow lock server would otherwise stall the k-th caller k timeouts).
	inflight *check
	// last is the last check's answer; its CheckedAt is zero before one.
	last LockHealth
}

// check is one ping; h is set before done is closed.
type check struct {
	done chan struct{}
	h    LockHealth
}

// NewLockProbe registers stockguard_lock_backend_up on reg for backend,
// whose health ping answers; each check waits at most timeout. The gauge
// starts at 0 (not known to be up) until the first check.
func NewLockProbe(reg prometheus.Registerer, backend string, ping func(context.Context) error, timeout time.Duration) *LockProbe {
	p := &LockProbe{backend: backend, ping: ping, timeout: timeout,
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "stockguard_lock_backend_up",
			Help:        "1 when the last health ping of the lock backend succeeded (the periodic probe; /readyz before its first), else 0.",
			ConstLabels: prometheus.Labels{"backend": backend},
		})}
	reg.MustRegister(p.up)
	return p
}

// Check pings the backend, or joins the ping already in flight, sets the
// gauge and returns the result: within the probe's timeout (unhealthy if
// the ping has not answered by then, and so are the gauge and Last until
// it does), or sooner when ctx ends (unhealthy, with ctx's error).
func (p *LockProbe) Check(ctx context.Context) LockHealth {
	p.mu.Lock()
	c := p.inflight
	if c == nil {
		c = &check{done: make(chan struct{})}
		p.inflight = c
		// The ping serves every caller that joins it, so no one caller's
		// cancellation may cut it short; the timeout bounds it.
		go p.run(context.WithoutCancel(ctx), c)
	}
	p.mu.Unlock()
	// A ping that does not honour its deadline must not hold the callers.
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return c.h
	case <-t.C:
		return p.unanswered(c)
	case <-ctx.Done():
		// Says nothing of the backend: the gauge and last stay as they are.
		msg := "health check cut short: " + ctx.Err().Error()
		return LockHealth{Backend: p.backend, Reason: msg, Error: msg}
	}
}

// unanswered is the answer to a check whose ping outlived the timeout. The
// ping may hang far longer (a server that accepts and never replies, a
// client call that ignores its context), and until it returns the gauge
// and /readyz must say down, not what the ping before it said. A ping that
// has just returned has the last word: its answer is the one kept.
func (p *LockProbe) unanswered(c *check) LockHealth {
	msg := fmt.Sprintf("health ping unanswered after %v", p.timeout)
	h := LockHealth{Backend: p.backend, Reason: msg, Error: msg, CheckedAt: time.Now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflight != c {
		return c.h // run set it before it took mu
	}
	p.up.Set(0)
	p.last = h
	return h
}

func (p *LockProbe) run(ctx context.Context, c *check) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	c.h = LockHealth{Backend: p.backend, Healthy: true}
	if err := p.ping(ctx); err != nil {
		c.h.Healthy, c.h.Reason, c.h.Error = false, reason(err, p.timeout), err.Error()
	}
	c.h.CheckedAt = time.Now()
	// Under mu, as unanswered's: the gauge and last then always say the same.
	p.mu.Lock()
	if c.h.Healthy {
		p.up.Set(1)
	} else {
		p.up.Set(0)
	}
	p.inflight = nil
	p.last = c.h
	p.mu.Unlock()
	close(c.done)
}

// reason is the public text of a failed ping: one of a few fixed phrases,
// never the error's own text, which names the lock servers and how dialing
// them failed.
func reason(err error, timeout time.Duration) string {
	switch {
	case errors.Is(err, lock.ErrUnavailable):
		return lock.ErrUnavailable.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("health ping unanswered after %v", timeout)
	}
	return "health ping failed"
}

// Last returns the last check's answer without waiting for a ping, so
// that a readiness probe answers at once while the lock servers hang (a
// probe's own timeout, 2 s in the Helm chart, would otherwise count every
// replica unready during a lock outage, which the lock's health must not
// do). Before any check has answered it checks, as Check does: an instance
// just started reports what its lock servers said, not nothing.
func (p *LockProbe) Last(ctx context.Context) LockHealth {
	p.mu.Lock()
	h := p.last
	p.mu.Unlock()
	if h.CheckedAt.IsZero() {
		return p.Check(ctx)
	}
	return h
}

// Run checks at once, then every interval, until ctx ends.
func (p *LockProbe) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

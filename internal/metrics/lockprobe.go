package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LockHealth is the lock backend's health as /readyz reports it.
type LockHealth struct {
	Backend string `json:"backend"`
	Healthy bool   `json:"healthy"`
	Error   string `json:"error,omitempty"`
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
	mu      sync.Mutex // serialises checks: one ping in flight at a time
}

// NewLockProbe registers stockguard_lock_backend_up on reg for backend,
// whose health ping answers; each check waits at most timeout. The gauge
// starts at 0 (not known to be up) until the first check.
func NewLockProbe(reg prometheus.Registerer, backend string, ping func(context.Context) error, timeout time.Duration) *LockProbe {
	p := &LockProbe{backend: backend, ping: ping, timeout: timeout,
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "stockguard_lock_backend_up",
			Help:        "1 when the last health ping of the lock backend succeeded (readyz and a periodic probe), else 0.",
			ConstLabels: prometheus.Labels{"backend": backend},
		})}
	reg.MustRegister(p.up)
	return p
}

// Check pings the backend now, sets the gauge and returns the result.
func (p *LockProbe) Check(ctx context.Context) LockHealth {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	h := LockHealth{Backend: p.backend, Healthy: true}
	if err := p.ping(ctx); err != nil {
		h.Healthy, h.Error = false, err.Error()
	}
	if h.Healthy {
		p.up.Set(1)
	} else {
		p.up.Set(0)
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

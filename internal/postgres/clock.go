package postgres

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Clock is the database's clock, read through the local one: local time
// plus the offset last measured against Postgres. Holds are stamped and
// judged by it on every instance (their start and end, the reaper's "due",
// a confirm's "too late"), so instances whose own clocks disagree still
// agree on when a hold ends; with each instance's own clock, one running
// two minutes fast reaped holds two minutes early, and one running slow
// wrote holds already over for everyone else. Reading now() in every
// statement instead would move the hold's start and the confirm's check
// into SQL and add a read to every confirm's decision under the leases.
type Clock struct {
	db       *Store
	local    func() time.Time
	interval time.Duration
	log      *slog.Logger
	observe  func(time.Duration)
	offset   atomic.Int64
	// skewed is set while the offset is over clockWarnOffset, so the
	// warning is logged when it starts, not every interval.
	skewed bool
	stop   context.CancelFunc
	done   chan struct{}
}

// DefaultClockInterval is how often a Clock measures the offset again:
// clocks drift by milliseconds an hour, and a stepped clock (an NTP
// correction) is followed within it.
const DefaultClockInterval = 30 * time.Second

// clockSamples is how many round trips one measurement makes; the one
// that came back soonest is kept, its midpoint the least uncertain.
const clockSamples = 5

// clockWarnOffset is the offset past which the local clock is worth a
// warning: holds and expiries still follow the database, but logs and
// traces of this instance are that far off.
const clockWarnOffset = time.Second

// ClockOption configures a Clock.
type ClockOption func(*Clock)

// WithClockInterval sets how often the offset is measured again. Default
// DefaultClockInterval.
func WithClockInterval(d time.Duration) ClockOption { return func(c *Clock) { c.interval = d } }

// WithClockLogger logs a large offset and failed measurements. Default: silent.
func WithClockLogger(l *slog.Logger) ClockOption { return func(c *Clock) { c.log = l } }

// WithClockObserver is told every offset measured (a gauge). Default: none.
func WithClockObserver(f func(offset time.Duration)) ClockOption {
	return func(c *Clock) { c.observe = f }
}

// WithLocalClock replaces the local clock the offset is measured against.
// Default time.Now; tests skew it.
func WithLocalClock(now func() time.Time) ClockOption { return func(c *Clock) { c.local = now } }

// StartClock measures the offset of the database's clock from the local
// one, failing if it cannot, and then measures it again every interval on
// a goroutine of its own until ctx ends or Close.
func (s *Store) StartClock(ctx context.Context, opts ...ClockOption) (*Clock, error) {
	c := &Clock{db: s, local: time.Now, interval: DefaultClockInterval, log: slog.New(slog.DiscardHandler),
		observe: func(time.Duration) {}, done: make(chan struct{})}
	for _, o := range opts {
		o(c)
	}
	if err := c.measure(ctx); err != nil {
		return nil, err
	}
	ctx, c.stop = context.WithCancel(ctx)
	go c.run(ctx)
	return c, nil
}

// Now is the database's time as this instance reckons it.
func (c *Clock) Now() time.Time { return c.local().Add(c.Offset()) }

// Offset is the database's clock minus the local one, as last measured.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Close stops the measurements and waits for the goroutine to end.
func (c *Clock) Close() {
	c.stop()
	<-c.done
}

func (c *Clock) run(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.measure(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("clock: measuring the database's clock; keeping the last offset",
				"offset", c.Offset(), "err", err)
		}
	}
}

// measure takes clockSamples readings of clock_timestamp() and keeps the
// offset of the one with the shortest round trip, taken at its midpoint.
func (c *Clock) measure(ctx context.Context) error {
	best, bestRTT := time.Duration(0), time.Duration(-1)
	for range clockSamples {
		mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		sent := c.local()
		var db time.Time
		err := c.db.sqlDB.QueryRowContext(mctx, `SELECT clock_timestamp()`).Scan(&db)
		back := c.local()
		cancel()
		if err != nil {
			return translate(ctx, "read the database's clock", err)
		}
		if rtt := back.Sub(sent); bestRTT < 0 || rtt < bestRTT {
			best, bestRTT = db.Sub(sent.Add(rtt/2)), rtt
		}
	}
	c.offset.Store(int64(best))
	c.observe(best)
	switch over := best.Abs() > clockWarnOffset; {
	case over && !c.skewed:
		c.log.Warn("clock: this instance's clock is off the database's; holds follow the database's",
			"offset", best, "round_trip", bestRTT)
	case !over && c.skewed:
		c.log.Info("clock: this instance's clock is back near the database's", "offset", best)
	}
	c.skewed = best.Abs() > clockWarnOffset
	return nil
}

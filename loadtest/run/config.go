package run

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"

	"github.com/stockguard/stockguard/loadtest/progress"
)

// Config is one run of the load tester against instances that are already up.
type Config struct {
	URLs     []string
	Workload Workload
	// Orders is the number of orders of a closed-loop run.
	Orders int
	// Concurrency is the number of clients of a closed-loop run, and the cap
	// on requests in flight of an open-loop run.
	Concurrency int
	// Rate (orders per second) and Duration make the run open-loop: orders
	// are due at fixed times whatever the service's latency, and latency is
	// measured from when each order was due, so a stalled service is charged
	// for the queue it causes (no coordinated omission).
	Rate     float64
	Duration time.Duration
	// Timeout bounds the sending phase; orders not yet sent are skipped and
	// requests in flight finish (each within RequestTimeout). In open loop
	// it must be at least Duration, or the last orders due are never sent.
	Timeout        time.Duration
	RequestTimeout time.Duration
	// HoldSeconds is every order's hold. It must outlast the run until it
	// is verified (verifiedWithin): an expired hold returns its units to
	// stock, where they are sold again, and a safe service then looks as
	// if it had oversold.
	HoldSeconds int
	AdminToken  string
	// Label and Backend are informational and go to the result.
	Label, Backend string
	// Fencing is the instances' --fencing, "on" (or empty: the service's
	// default) or "off"; it goes to the result, and off, the store stamps no
	// token on a row, so the rows' tokens are not checked against the 201s'.
	Fencing        string
	ExpectedUnsafe bool
	Progress       progress.Mode
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if len(c.URLs) == 0 {
		return errors.New("no instance URLs: set --urls")
	}
	for _, u := range c.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("url %q: want http://host:port", u)
		}
	}
	if err := c.Workload.Validate(); err != nil {
		return err
	}
	switch {
	case c.Concurrency < 1 || c.Concurrency > 10_000:
		return fmt.Errorf("concurrency %d: want 1..10000", c.Concurrency)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate %v: want > 0", c.Rate)
	case c.Duration < 0:
		return fmt.Errorf("--duration=%v: want > 0", c.Duration)
	case c.Rate > 0 && c.Duration <= 0:
		return errors.New("--rate needs --duration")
	case c.Rate == 0 && c.Duration > 0:
		return errors.New("--duration needs --rate")
	case c.Timeout <= 0:
		return fmt.Errorf("timeout %v: want > 0", c.Timeout)
	case c.openLoop() && c.Timeout < c.Duration:
		return fmt.Errorf("--timeout=%v is shorter than --duration=%v: the open loop would stop sending before its last orders are due", c.Timeout, c.Duration)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("request-timeout %v: want > 0", c.RequestTimeout)
	case c.HoldSeconds < 1 || c.HoldSeconds > MaxHoldSeconds:
		return fmt.Errorf("hold-seconds %d: want 1..%d", c.HoldSeconds, MaxHoldSeconds)
	case MaxHoldSeconds*time.Second < c.verifiedWithin():
		// No --hold-seconds could do: asking for a longer one would only
		// send the user to a second refusal.
		return c.tooLongToVerify()
	case time.Duration(c.HoldSeconds)*time.Second < c.verifiedWithin():
		need := c.verifiedWithin()
		return fmt.Errorf("--hold-seconds=%d: the holds could expire before the run is verified, and their units be sold again: "+
			"want at least %d (--timeout=%v, + %v for the last requests, reconciling unknown outcomes and verifying), or a shorter --timeout",
			c.HoldSeconds, int64((need+time.Second-1)/time.Second), c.Timeout, need-c.Timeout)
	case c.Fencing != "" && c.Fencing != "on" && c.Fencing != "off":
		return fmt.Errorf("fencing %q: want on or off", c.Fencing)
	}
	n := c.orderCount()
	if n <= 0 {
		return errNoOrders
	}
	if n > MaxOrders {
		return fmt.Errorf("%d orders: at most %d a run", n, MaxOrders)
	}
	perOrder, given, lower := c.Workload.Lines.Max, fmt.Sprintf("--lines=%s", c.Workload.Lines), "--lines"
	if c.Workload.SKUs < perOrder {
		// Generate gives an order no more lines than there are SKUs.
		perOrder, given, lower = c.Workload.SKUs, fmt.Sprintf("--lines=%s, --skus=%d", c.Workload.Lines, c.Workload.SKUs), "--skus"
	}
	if lines := n * perOrder; lines > MaxOrderLines {
		return fmt.Errorf("%d orders (%s) of up to %d lines (%s) are %d order lines: at most %d a run, "+
			"since every order's body is built before the first is sent; lower %[2]s or %[7]s",
			n, c.ordersFlags(), perOrder, given, lines, MaxOrderLines, lower)
	}
	return nil
}

// MaxHoldSeconds is the longest hold the service grants.
const MaxHoldSeconds = 86400

// tooLongToVerify is Validate's error for a run so long that even the
// longest hold would expire before it is verified.
func (c Config) tooLongToVerify() error {
	overhead := c.verifiedWithin() - c.Timeout
	longest := MaxHoldSeconds*time.Second - overhead
	given, fix := fmt.Sprintf("--timeout=%v", c.Timeout), fmt.Sprintf("shorten --timeout to at most %v", longest)
	if c.openLoop() {
		given = fmt.Sprintf("--duration=%v, %s", c.Duration, given)
	}
	switch {
	case longest <= 0 || c.openLoop() && longest <= OpenLoopGrace:
		fix = "shorten --request-timeout"
	case c.openLoop() && c.Duration+OpenLoopGrace > longest:
		// A --timeout short enough would leave the last orders due no
		// time to be sent: --duration is too long too.
		fix = fmt.Sprintf("shorten --duration to at most %v and --timeout to at most %v, %v longer, for the last orders due to be sent",
			longest-OpenLoopGrace, longest, OpenLoopGrace)
	}
	return fmt.Errorf("%s: even the longest hold (--hold-seconds=%d) would expire before the run is verified, "+
		"%v after --timeout (the last requests, reconciling unknown outcomes, verifying): %s",
		given, MaxHoldSeconds, overhead, fix)
}

// OpenLoopGrace is how much longer than --duration an open loop's
// --timeout should let it send: orders due at the end may wait for a slot
// behind --concurrency requests in flight.
const OpenLoopGrace = time.Minute

// ordersFlags names the flags that set the number of orders.
func (c Config) ordersFlags() string {
	if c.openLoop() {
		return "--rate × --duration"
	}
	return "--orders"
}

func (c Config) openLoop() bool { return c.Rate > 0 }

// verifyMargin is verifiedWithin's allowance for the verification: the
// time to read every SKU's audit and counters after the reconciliation,
// and holdClockMargin.
const verifyMargin = verifyReads + holdClockMargin

// verifyReads is the part of verifyMargin for reading every SKU's audit
// and counters through one instance.
const verifyReads = 50 * time.Second

// holdClockMargin is how long before a hold could end, by the load
// tester's clock from the first order, the verification stops reading. An
// instance stamps a hold's expiry by its own clock and a reaper, on any
// instance, compares it with its own: clocks that disagree expire a hold
// early by as much. NTP keeps hosts well within a second of each other;
// 10 s also covers a clock stepped or left to drift.
const holdClockMargin = 10 * time.Second

// holdsSafeUntil is when the verification of a run whose first order was
// placed at first must have read everything: after it, a hold could have
// expired and its units been sold again, and a safe service would look as
// if it had lost them.
func (c Config) holdsSafeUntil(first time.Time) time.Time {
	return first.Add(time.Duration(c.HoldSeconds)*time.Second - holdClockMargin)
}

// reconcileBudget bounds the resending of orders of unknown outcome after
// the sending phase.
func (c Config) reconcileBudget() time.Duration { return reconcileWait + 3*c.RequestTimeout }

// verifiedWithin bounds how long after its first order a run may still be
// verifying: the sending phase (Timeout), the requests in flight when it
// ends, the reconciliation and the verification's reads. Every hold must
// last longer.
func (c Config) verifiedWithin() time.Duration {
	return c.Timeout + c.RequestTimeout + c.reconcileBudget() + verifyMargin
}

func (c Config) orderCount() int {
	if c.openLoop() {
		return int(math.Min(math.Round(c.Rate*c.Duration.Seconds()), MaxOrders+1))
	}
	return c.Orders
}

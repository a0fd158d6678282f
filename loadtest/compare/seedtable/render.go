package seedtable

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Settings size the seed table's measurements; compare passes them on.
type Settings struct {
	Throughput ThroughputConfig
	LockTTL    time.Duration // the rig's and the fencing runs' --lock-ttl
	LockWait   time.Duration
	Window     time.Duration // each availability cell
	Fairness   time.Duration
	// Fencing names the backends that run chaos's pause-holder.
	Fencing []string
}

// DefaultSettings are short enough for make demo on two cores.
func DefaultSettings() Settings {
	return Settings{
		Throughput: ThroughputConfig{Orders: 500, Concurrency: 48, Timeout: 5 * time.Second, ManySKUs: 1000, Seed: 42},
		LockTTL:    time.Second, LockWait: time.Second, Window: time.Second, Fairness: time.Second,
		Fencing: []string{"redis"},
	}
}

// row is one line of the table: a measure and its cell for a backend.
type row struct {
	label string
	cell  func(Table) string
}

var rows = []row{
	{"hot SKU: orders/s, p99 ¹", func(t Table) string { return t.HotSKU.cell() }},
	{"1,000 SKUs: orders/s, p99 ¹", func(t Table) string { return t.ManySKUs.cell() }},
	{"release after the holder dies ²", func(t Table) string { return t.Release.cell() }},
	{"fairness: share per instance ³", func(t Table) string { return t.Fairness.sharesCell() }},
	{"fairness: FIFO violations ³", func(t Table) string { return t.Fairness.fifoCell() }},
	{"201s, minority of servers down ⁴", func(t Table) string { return t.Availability.cell(t.Availability.Minority) }},
	{"201s, majority of servers down ⁴", func(t Table) string { return t.Availability.cell(t.Availability.Majority) }},
	{"fencing on: stale writes refused ⁵", func(t Table) string { return t.Fencing.onCell() }},
	{"fencing off: units damaged ⁵", func(t Table) string { return t.Fencing.offCell() }},
}

var factRows = []row{
	{"CAP side ⁶", func(t Table) string { return t.CAP.Text }},
	{"lock types ⁶", func(t Table) string { return t.LockTypes.Text }},
}

// Footnotes say how each measured row was measured, with the settings s.
func Footnotes(s Settings) []string {
	tc := s.Throughput
	return []string{
		fmt.Sprintf("¹ Closed loop, %d clients, %d one-line one-unit orders (sending bounded by %v) against the comparison's instances on the shared lock servers; "+
			"hot: every order on one SKU; 1,000 SKUs: spread evenly over %d fresh SKUs. orders/s counts every answered order; p99 is measured from send.",
			tc.Concurrency, tc.Orders, tc.Timeout, tc.ManySKUs),
		fmt.Sprintf("² Two instances on lock servers of the run's own, --lock-ttl=%v, --lock-wait=%v: the last instance holds a fresh SKU's lease inside its critical section "+
			"(an order with X-Chaos-Pause, its stall seen in its log), is SIGKILLed, and the first instance sends orders for that SKU until one answers 201. "+
			"The bound is the lease TTL for redis and redlock, the session for zookeeper (%v) and etcd (its lease, --lock-ttl in whole seconds), "+
			"the lock connection for postgres (the server ends the session when the socket closes).", s.LockTTL, s.LockWait, ZKSessionTimeout),
		fmt.Sprintf("³ Three Lockers built from the backends table, as three instances hold them, each with %d goroutines acquiring one fresh key in a loop for %v, holding it %v; "+
			"shared stack servers. Share: each Locker's share of the acquisitions. FIFO violation: an acquisition overtaken by a waiter that began waiting later "+
			"(counted per acquisition, as a share of all).", fairGoroutines, s.Fairness, fairHold),
		fmt.Sprintf("⁴ The instance left from ² on the same own servers (never the shared stack's), %d closed-loop clients of one-unit orders; SIGKILL a minority (followers first), "+
			"wait %v, then up to a majority, wait %v: the share of the orders sent in each window that were answered 201 (the rest 503 lock_unavailable or no answer "+
			"within --lock-wait).", availabilityClients, s.Window, s.Window),
		fmt.Sprintf("⁵ load chaos --scenario=pause-holder with fencing on and off (--lock-ttl=%v, own lock servers, 3 instances): one instance is SIGSTOPped past its lease "+
			"while orders sit between claim and write, then thawed. On: writes the store refused (stockguard_stale_fence_total) and units damaged; off: units oversold + lost.", s.LockTTL),
		"⁶ Documented properties, not measurements; sources below.",
		"n/a — " + naNoLock + ": none takes no lock, so nothing is held, waited for or released; " +
			naInProcess + ": local's mutex lives in one process, so another instance never waits for it; " +
			naNoServers + ": none and local use no lock server; " +
			naOneServer + ": postgres is its own lock server and the store, so with it down nothing is served at all; " +
			naNoMinority + ": a single Redis is all or nothing; " +
			naNoToken + ": without a token there is nothing to fence; " +
			naNotRun + ": the pause-holder runs take ~15 s a backend, so the demo runs them for the backends --seed-fencing names.",
	}
}

// Sources lists each backend's documentation for the fact rows.
func Sources(tables []Table) []string {
	var out []string
	for _, t := range tables {
		src := t.CAP.Source
		if t.LockTypes.Source != src {
			src += " ; " + t.LockTypes.Source
		}
		out = append(out, t.Backend+": "+src)
	}
	return out
}

// Grid is the table as text cells: the header (an empty corner, then the
// backends), then one line per measure; withFacts adds the fact rows.
func Grid(tables []Table, withFacts bool) [][]string {
	head := []string{""}
	for _, t := range tables {
		head = append(head, t.Backend)
	}
	out := [][]string{head}
	all := rows
	if withFacts {
		all = append(append([]row(nil), rows...), factRows...)
	}
	for _, r := range all {
		line := []string{r.label}
		for _, t := range tables {
			line = append(line, r.cell(t))
		}
		out = append(out, line)
	}
	return out
}

// Print writes the measured rows as a terminal table, then the footnotes
// and the facts, one backend a line.
func Print(w io.Writer, tables []Table, s Settings) {
	if len(tables) == 0 {
		return
	}
	fmt.Fprintln(w, "\nThe article's table, measured:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, line := range Grid(tables, false) {
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	_ = tw.Flush()
	for _, f := range Footnotes(s) {
		fmt.Fprintln(w, "  "+f)
	}
	for _, t := range tables {
		fmt.Fprintf(w, "  %s: %s; %s\n", t.Backend, t.CAP.Text, t.LockTypes.Text)
	}
}

func na(reason string) string { return "n/a: " + reason }

func errCell(err string) string {
	if len(err) > 60 {
		err = err[:57] + "..."
	}
	return "error: " + err
}

func (tp Throughput) cell() string {
	switch {
	case tp.Error != "":
		return errCell(tp.Error)
	case tp.Orders == 0:
		return "not measured"
	}
	s := fmt.Sprintf("%.0f/s, p99 %.0f ms", tp.OrdersPerS, tp.P99Ms)
	switch {
	case tp.Damaged:
		s += " (damaged)"
	case !tp.Safe:
		s += " (inconclusive)"
	}
	return s
}

func (r Release) cell() string {
	switch {
	case r.NA != "":
		return na(r.NA)
	case r.Error != "":
		return errCell(r.Error)
	case r.Ms == nil:
		return "not measured"
	}
	return fmt.Sprintf("%.2f s (%s)", *r.Ms/1000, r.Bound)
}

func (f Fairness) sharesCell() string {
	switch {
	case f.NA != "":
		return na(f.NA)
	case f.Error != "":
		return errCell(f.Error)
	}
	parts := make([]string, len(f.Shares))
	for i, s := range f.Shares {
		parts[i] = fmt.Sprintf("%.0f", 100*s)
	}
	return strings.Join(parts, "/") + fmt.Sprintf("%% of %d", f.Acquisitions)
}

func (f Fairness) fifoCell() string {
	switch {
	case f.NA != "":
		return na(f.NA)
	case f.Error != "":
		return errCell(f.Error)
	}
	return fmt.Sprintf("%d (%.0f%%)", f.FIFOViolations, 100*f.ViolationShare)
}

func (a Availability) cell(w *Window) string {
	switch {
	case a.NA != "":
		return na(a.NA)
	case w != nil && w.NA != "":
		return na(w.NA)
	case a.Error != "" && w == nil:
		return errCell(a.Error)
	case w == nil:
		return "not measured"
	}
	return fmt.Sprintf("%.0f%% of %d (%d of %d down)", 100*w.Share201, w.Orders, w.Down, a.Servers)
}

func (f Fencing) onCell() string {
	switch {
	case f.NA != "":
		return na(f.NA)
	case f.Error != "" && f.OnDamaged > 0: // an error elsewhere hides no damage
		return fmt.Sprintf("%d damaged; %s", f.OnDamaged, errCell(f.Error))
	case f.Error != "":
		return errCell(f.Error)
	}
	return fmt.Sprintf("%d refused, %d damaged", f.StaleWritesRefused, f.OnDamaged)
}

func (f Fencing) offCell() string {
	switch {
	case f.NA != "":
		return na(f.NA)
	case f.Error != "":
		return errCell(f.Error)
	}
	return fmt.Sprintf("%d units", f.OffDamaged)
}

// Package seedtable measures, for one lock backend, the comparison table
// the source article ends with (Redlock against ZooKeeper), extended to
// every backend: throughput on one hot SKU and on 1,000 SKUs, how long a
// lock stays held after its holder dies, fairness under contention from
// three instances, availability with a minority and a majority of the lock
// servers down, and what fencing does for a paused holder; plus, as plain
// facts with their source, the CAP side each system chose and the lock
// types it offers. compare runs it per backend and puts the result in its
// JSON (seed_table), its terminal table and its HTML report.
//
// Every figure is measured by this package on the machine it runs on;
// a cell that does not apply to a backend carries NA, the reason why.
package seedtable

// Table is one backend's column of the article's table, the JSON object
// seed_table of compare.
type Table struct {
	Backend      string       `json:"backend"`
	HotSKU       Throughput   `json:"hot_sku"`
	ManySKUs     Throughput   `json:"skus_1000"`
	Release      Release      `json:"release_after_holder_dies"`
	Fairness     Fairness     `json:"fairness"`
	Availability Availability `json:"availability"`
	Fencing      Fencing      `json:"fencing"`
	CAP          Fact         `json:"cap"`
	LockTypes    Fact         `json:"lock_types"`
}

// Throughput is a short closed-loop run of one-line, one-unit orders.
type Throughput struct {
	SKUs       int     `json:"skus"`
	Orders     int     `json:"orders"`
	OrdersPerS float64 `json:"orders_per_s"`
	P99Ms      float64 `json:"p99_ms"`
	// Safe is the run's verification: nothing oversold or lost, and every
	// order accounted for; Damaged, units oversold or lost or sources that
	// disagree. A run neither Safe nor Damaged is inconclusive.
	Safe    bool   `json:"safe"`
	Damaged bool   `json:"damaged,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Release is the time from SIGKILL of the instance holding a SKU's lease
// to the first order for that SKU reserved through another instance.
type Release struct {
	NA string `json:"n_a,omitempty"`
	// Bound is what frees the lock: the lease TTL, the session timeout, or
	// the database connection's end.
	Bound string   `json:"bound,omitempty"`
	Ms    *float64 `json:"ms,omitempty"`
	// Attempts is how many orders the other instance sent until one was
	// reserved (each waits at most the instances' --lock-wait).
	Attempts int    `json:"attempts,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Fairness is contention on one key from three Lockers of the backend, as
// three instances hold them, each with several goroutines.
type Fairness struct {
	NA           string `json:"n_a,omitempty"`
	Lockers      int    `json:"lockers,omitempty"`
	Goroutines   int    `json:"goroutines_per_locker,omitempty"`
	Acquisitions int    `json:"acquisitions,omitempty"`
	// Shares are each Locker's share of the acquisitions.
	Shares []float64 `json:"shares,omitempty"`
	// FIFOViolations counts acquisitions overtaken by a waiter that began
	// waiting later but acquired earlier.
	FIFOViolations int     `json:"fifo_violations"`
	ViolationShare float64 `json:"fifo_violation_share"`
	Error          string  `json:"error,omitempty"`
}

// Availability is the share of orders answered 201 while lock servers of
// the run's own are down.
type Availability struct {
	NA       string  `json:"n_a,omitempty"`
	Servers  int     `json:"servers,omitempty"`
	Minority *Window `json:"minority_down,omitempty"`
	Majority *Window `json:"majority_down,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// Window is the load while some lock servers were down.
type Window struct {
	NA       string  `json:"n_a,omitempty"`
	Down     int     `json:"servers_down,omitempty"`
	Orders   int     `json:"orders,omitempty"`
	Reserved int     `json:"reserved,omitempty"`
	Share201 float64 `json:"share_201"`
	Seconds  float64 `json:"seconds,omitempty"`
}

// Fencing is the chaos pause-holder scenario run with fencing on and off.
type Fencing struct {
	NA string `json:"n_a,omitempty"`
	// On: writes the store refused from the paused holder, and damage.
	StaleWritesRefused int64 `json:"stale_writes_refused"`
	OnDamaged          int64 `json:"units_damaged_fencing_on"`
	// OffDamaged is oversold plus lost units with fencing off.
	OffDamaged int64 `json:"units_damaged_fencing_off"`
	// OnFailures are the fencing-on run's own failures (disagreeing
	// sources, unresolved orders) when it ran but did not pass.
	OnFailures []string `json:"fencing_on_failures,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// Damaged reports whether the column shows damage: units oversold or lost
// in a throughput run, or with fencing on under a paused holder. For a
// backend that should be safe, that is damage like its run's (exit 3).
func (t Table) Damaged() bool {
	return t.HotSKU.Damaged || t.ManySKUs.Damaged || (t.Fencing.NA == "" && t.Fencing.OnDamaged > 0)
}

// Fact is a property of a system, not a measurement, with its source.
type Fact struct {
	Text   string `json:"text"`
	Source string `json:"source"`
}

// Failures lists what a safe backend's column must not show: damage in a
// throughput run, or one that failed (its safety is then unproven); with
// fencing on under a paused holder, damage or a run that did not pass,
// whatever became of the fencing-off run.
func (t Table) Failures() []string {
	var out []string
	for _, tp := range []struct {
		name string
		v    Throughput
	}{{"hot SKU", t.HotSKU}, {"1,000 SKUs", t.ManySKUs}} {
		switch {
		case tp.v.Error != "":
			out = append(out, t.Backend+": seed table "+tp.name+" run failed: "+tp.v.Error)
		case tp.v.Damaged:
			out = append(out, t.Backend+": seed table "+tp.name+" run oversold or lost units")
		case tp.v.Orders > 0 && !tp.v.Safe:
			out = append(out, t.Backend+": seed table "+tp.name+" run inconclusive: orders whose outcome stayed unknown")
		}
	}
	if t.Fencing.NA == "" {
		if t.Fencing.OnDamaged > 0 {
			out = append(out, t.Backend+": seed table pause-holder with fencing on damaged units")
		}
		for _, f := range t.Fencing.OnFailures {
			out = append(out, t.Backend+": seed table pause-holder with fencing on: "+f)
		}
	}
	return out
}

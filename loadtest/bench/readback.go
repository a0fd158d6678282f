package bench

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/stockguard/stockguard/loadtest/bench/judge"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/run"
)

// Readback is the store's account of one judged attack, read after it,
// against what the judge's answers allow. Each judged order is one unit
// on one SKU under a key of its own, sent once: a 201 reserved exactly one
// unit, a 4xx none, an unsettled answer (none, or a 5xx) none or one. So
// the units each judged SKU holds lie between its 201s of the warm-up and
// the window and that plus its unsettled answers; anything else is a 201
// without its unit (a lost update) or a unit without its answer. Each SKU
// is held to its own bounds: over all of them, a 201 lost on one would
// hide behind an unsettled answer that reserved on another. Min and Max
// are the bounds added over the SKUs.
type Readback struct {
	SKUs     int   `json:"skus"`
	Held     int64 `json:"held"` // reserved + sold over the judged SKUs
	Min      int64 `json:"min"`
	Max      int64 `json:"max"`
	Problems int   `json:"problems"`
	// Listed are the first maxListedProblems problems.
	Listed []string `json:"listed,omitempty"`
	// Error says why the SKUs could not be read: the window is not
	// verified, neither safe nor damaged.
	Error   string `json:"error,omitempty"`
	Safe    bool   `json:"safe"`
	Verdict string `json:"verdict"`
}

const maxListedProblems = 5

// Damaged reports whether the store disagrees with the judge's answers.
func (rb *Readback) Damaged() bool { return rb != nil && rb.Error == "" && !rb.Safe }

// readBack reads every judged SKU's counters once from base (one GET a
// SKU, after the window: nothing of it is measured) and checks them
// against the attack's answers and the stock each SKU was created with.
func readBack(ctx context.Context, c *client.Client, base string, skus []string, stock int64, res judge.Result) *Readback {
	rb := &Readback{SKUs: len(skus)}
	var unsettled int64
	for _, a := range res.BySKU {
		rb.Min += a.Created
		unsettled += a.Unsettled
	}
	rb.Max = rb.Min + unsettled
	// An answer counted in all but in no SKU's would loosen some SKU's bounds.
	if len(res.BySKU) != len(skus) || rb.Min != res.WarmupCreated+res.Created || unsettled != res.WarmupUnsettled+res.Unsettled {
		rb.Error = fmt.Sprintf("judge readback: answers by SKU (%d SKUs: %d created, %d unsettled) against %d SKUs judged (%d created, %d unsettled)",
			len(res.BySKU), rb.Min, unsettled, len(skus), res.WarmupCreated+res.Created, res.WarmupUnsettled+res.Unsettled)
		rb.Verdict = "NOT VERIFIED: " + rb.Error
		return rb
	}
	states := make([]client.SKUState, len(skus))
	var held atomic.Int64
	err := run.ForEach(ctx, len(skus), 16, func(ctx context.Context, i int) error {
		st, err := c.GetSKU(ctx, base, skus[i])
		if err != nil {
			return fmt.Errorf("judge readback: %w", err)
		}
		states[i] = st
		held.Add(st.Reserved + st.Sold)
		return nil
	})
	if err != nil {
		rb.Error = err.Error()
		rb.Verdict = "NOT VERIFIED: " + rb.Error
		return rb
	}
	rb.Held = held.Load()
	problem := func(format string, args ...any) {
		rb.Problems++
		if len(rb.Listed) < maxListedProblems {
			rb.Listed = append(rb.Listed, fmt.Sprintf(format, args...))
		}
	}
	for i, st := range states {
		a := res.BySKU[i]
		switch h := st.Reserved + st.Sold; {
		case st.Received != stock:
			problem("%s: received %d, created with %d", skus[i], st.Received, stock)
		case st.Received != st.Available+st.Reserved+st.Sold:
			problem("%s: received %d != available %d + reserved %d + sold %d", skus[i], st.Received, st.Available, st.Reserved, st.Sold)
		case st.Available < 0 || st.Reserved < 0 || st.Sold < 0:
			problem("%s: a counter below 0: available %d reserved %d sold %d", skus[i], st.Available, st.Reserved, st.Sold)
		case h < a.Created || h > a.Created+a.Unsettled:
			problem("%s holds %d units, its answers allow %d..%d", skus[i], h, a.Created, a.Created+a.Unsettled)
		}
	}
	rb.Safe = rb.Problems == 0
	rb.Verdict = fmt.Sprintf("safe: %d units held, the answers allow %d..%d, each SKU within its own", rb.Held, rb.Min, rb.Max)
	if !rb.Safe {
		rb.Verdict = fmt.Sprintf("UNSAFE: %d problems (%s)", rb.Problems, rb.Listed[0])
	}
	return rb
}

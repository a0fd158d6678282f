package history

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// DefaultTimeout bounds the check of a whole history unless WithTimeout
// says otherwise; a SKU whose linearizability check is still running when
// it passes is reported undecided, not passed.
const DefaultTimeout = 10 * time.Second

// ErrInvalidHistory is returned for a history Check cannot judge (an
// operation completed before it was invoked or after the final read, a SKU
// without stock, a quantity below 1).
var ErrInvalidHistory = errors.New("history: invalid history")

// Rule names what a violation breaks.
type Rule string

// The rules Check verifies.
const (
	RuleOrders       Rule = "orders"          // acknowledged orders exist once, with their lines
	RuleUnits        Rule = "units"           // outstanding acknowledged units ≤ stock
	RuleTransitions  Rule = "transitions"     // confirm / cancel / expire consistent
	RuleLinearizable Rule = "linearizability" // (available, held, sold) linearizable
	RuleTokens       Rule = "tokens"          // a placement's token ≥ those acknowledged before it began
)

// Violation is one broken rule, explained.
type Violation struct {
	SKU     string
	Rule    Rule
	Message string // several lines for a linearizability violation
}

func (v Violation) String() string {
	return fmt.Sprintf("SKU %s: %s: %s", v.SKU, v.Rule, v.Message)
}

// Report is the verdict on a history.
type Report struct {
	Violations []Violation
	// Undecided lists the SKUs whose linearizability check ran out of time.
	Undecided []string
	// SKUs counts the SKUs checked.
	SKUs int
}

// OK reports whether the history passed every check that finished.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// String lists the violations, or says all is well.
func (r Report) String() string {
	var b strings.Builder
	if r.OK() {
		fmt.Fprintf(&b, "history: %d SKUs, no violation", r.SKUs)
	} else {
		fmt.Fprintf(&b, "history: %d violation(s) over %d SKUs", len(r.Violations), r.SKUs)
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "\n- %s", v)
		}
	}
	if len(r.Undecided) > 0 {
		fmt.Fprintf(&b, "\nundecided within the time bound: %s", strings.Join(r.Undecided, ", "))
	}
	return b.String()
}

// Option configures Check.
type Option func(*config)

type config struct {
	timeout   time.Duration
	visualDir string
}

// WithTimeout bounds the check (default DefaultTimeout): the other rules
// take time linear in the history (n log n for the tokens' sort), and the
// linearizability search gets what they leave of the bound.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithVisualization writes porcupine's HTML visualization of each SKU that
// fails the linearizability check into dir, as <sku>.html (default: none).
func WithVisualization(dir string) Option { return func(c *config) { c.visualDir = dir } }

// Check verifies ops against the final read, given each SKU's stock at the
// start (its available units; held and sold start at 0). A SKU of stock
// that the final read has no row for is a violation: its state is unknown.
func Check(ops []Op, final Final, stock map[string]int64, opts ...Option) (Report, error) {
	cfg := config{timeout: DefaultTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	deadline := time.Now().Add(cfg.timeout)
	x, err := newIndex(ops, final, stock)
	if err != nil {
		return Report{}, err
	}
	var r Report
	r.SKUs = len(stock)
	x.checkOrders(&r)
	x.checkUnits(&r)
	x.checkTransitions(&r)
	x.checkTokens(&r)
	x.checkLinearizable(&r, deadline, cfg.visualDir)
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].SKU < r.Violations[j].SKU })
	return r, nil
}

// index joins operations and the final read.
type index struct {
	ops   []Op
	final Final
	stock map[string]int64
	skus  []string // sorted
	// t0 is the first invocation (every one precedes the final read), or
	// the final read without operations: the origin of a report's times.
	t0 time.Time

	finalByID  map[string][]int // order id → indexes in final.Orders
	finalByKey map[string][]int
	placeByKey map[string]int
	// placeOf maps an order id to the place operation that made it: from
	// the acknowledgement, or through the final read's idempotency key.
	placeOf map[string]int
}

func newIndex(ops []Op, final Final, stock map[string]int64) (*index, error) {
	x := &index{
		ops: ops, final: final, stock: stock,
		finalByID: map[string][]int{}, finalByKey: map[string][]int{},
		placeByKey: map[string]int{}, placeOf: map[string]int{},
	}
	for sku := range stock {
		x.skus = append(x.skus, sku)
	}
	slices.Sort(x.skus)
	x.t0 = final.At
	for i, op := range ops {
		if op.Invoke.Before(x.t0) {
			x.t0 = op.Invoke
		}
		if err := x.validate(op); err != nil {
			return nil, fmt.Errorf("%w: operation %d (client %d %s): %w", ErrInvalidHistory, i, op.Client, op.Kind, err)
		}
		if op.Kind == Place && op.Key != "" {
			if _, dup := x.placeByKey[op.Key]; dup {
				return nil, fmt.Errorf("%w: two place operations with key %q (fold retries into one operation)", ErrInvalidHistory, op.Key)
			}
			x.placeByKey[op.Key] = i
		}
	}
	for i, o := range final.Orders {
		x.finalByID[o.ID] = append(x.finalByID[o.ID], i)
		if o.Key != "" {
			x.finalByKey[o.Key] = append(x.finalByKey[o.Key], i)
		}
		for _, l := range o.Lines {
			if _, ok := stock[l.SKU]; !ok {
				return nil, fmt.Errorf("%w: final order %s has SKU %s with no stock given", ErrInvalidHistory, o.ID, l.SKU)
			}
		}
	}
	for i, op := range ops {
		if op.Kind != Place {
			continue
		}
		if op.Outcome.Result == OK {
			x.placeOf[op.Outcome.OrderID] = i
		} else if f := x.finalByKey[op.Key]; op.Key != "" && len(f) == 1 {
			x.placeOf[final.Orders[f[0]].ID] = i
		}
	}
	return x, nil
}

func (x *index) validate(op Op) error {
	switch op.Kind {
	case Place, Confirm, Cancel, Expire:
	default:
		return fmt.Errorf("kind %d", int(op.Kind))
	}
	if !op.Invoke.Before(x.final.At) {
		return errors.New("invoked after the final read")
	}
	if op.Outcome.Result != Unknown {
		if op.Complete.Before(op.Invoke) {
			return errors.New("completed before it was invoked")
		}
		if op.Complete.After(x.final.At) {
			return errors.New("completed after the final read")
		}
	}
	if op.Kind == Place {
		for _, l := range append(slices.Clone(op.Lines), op.Outcome.Lines...) {
			if _, ok := x.stock[l.SKU]; !ok {
				return fmt.Errorf("SKU %s has no stock given", l.SKU)
			}
			if l.Quantity < 1 {
				return fmt.Errorf("SKU %s quantity %d", l.SKU, l.Quantity)
			}
		}
	} else if op.OrderID == "" {
		return errors.New("no order id")
	}
	return nil
}

// linesOf returns the lines of the order place operation i made: as
// acknowledged, else as the final read found them, else as requested.
func (x *index) linesOf(i int) []Line {
	op := x.ops[i]
	if op.Outcome.Result == OK && len(op.Outcome.Lines) > 0 {
		return op.Outcome.Lines
	}
	if f := x.finalByKey[op.Key]; op.Key != "" && len(f) == 1 {
		return x.final.Orders[f[0]].Lines
	}
	return op.Lines
}

// finalOrder returns the final read's order id, if it appears exactly once.
func (x *index) finalOrder(id string) (FinalOrder, bool) {
	f := x.finalByID[id]
	if len(f) != 1 {
		return FinalOrder{}, false
	}
	return x.final.Orders[f[0]], true
}

func (x *index) finalSKU(sku string) (FinalSKU, bool) {
	for _, s := range x.final.SKUs {
		if s.SKU == sku {
			return s, true
		}
	}
	return FinalSKU{}, false
}

func quantity(lines []Line, sku string) int64 {
	var q int64
	for _, l := range lines {
		if l.SKU == sku {
			q += l.Quantity
		}
	}
	return q
}

// skusOf lists the distinct SKUs of lines, sorted.
func skusOf(lines []Line) []string {
	var out []string
	for _, l := range lines {
		if !slices.Contains(out, l.SKU) {
			out = append(out, l.SKU)
		}
	}
	slices.Sort(out)
	return out
}

func formatLines(lines []Line) string {
	parts := make([]string, len(lines))
	for i, l := range lines {
		parts[i] = fmt.Sprintf("%s×%d", l.SKU, l.Quantity)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// sameLines compares SKUs and quantities: a request has no tokens, and
// the tokens rule judges them.
func sameLines(a, b []Line) bool {
	key := func(ls []Line) []Line {
		c := make([]Line, len(ls))
		for i, l := range ls {
			c[i] = Line{SKU: l.SKU, Quantity: l.Quantity}
		}
		slices.SortFunc(c, func(p, q Line) int { return strings.Compare(p.SKU, q.SKU) })
		return c
	}
	return slices.Equal(key(a), key(b))
}

// describeOperation names an operation for a violation message.
func (x *index) describeOperation(i int) string {
	op := x.ops[i]
	s := fmt.Sprintf("client %d %s", op.Client, op.Kind)
	if op.Kind == Place {
		s += " " + formatLines(x.linesOf(i))
		if op.Key != "" {
			s += fmt.Sprintf(" key %q", op.Key)
		}
	} else {
		s += " order " + op.OrderID
	}
	s += fmt.Sprintf(" at %s", x.rel(op.Invoke))
	if op.Outcome.Result != Unknown {
		s += "–" + x.rel(op.Complete)
	}
	s += " → " + op.Outcome.Result.String()
	if op.Outcome.OrderID != "" {
		s += " " + op.Outcome.OrderID
	}
	if op.Outcome.Code != "" {
		s += " " + op.Outcome.Code
	}
	return s
}

// rel formats t relative to the first invocation.
func (x *index) rel(t time.Time) string {
	return fmt.Sprintf("%.3fs", t.Sub(x.t0).Seconds())
}

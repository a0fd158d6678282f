package history

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Bounds of a linearizability violation's explanation.
const (
	maxPrefixLines = 20 // steps of the linearizable prefix shown (the last ones)
	maxCandidates  = 8  // operations shown that could not come next
)

// checkLinearizable runs porcupine on each SKU until deadline; a SKU it
// fails is drawn into visualDir unless that is "".
func (x *index) checkLinearizable(r *Report, deadline time.Time, visualDir string) {
	for _, sku := range x.skus {
		if _, ok := x.finalSKU(sku); !ok {
			// Without the row there is no final state to explain, and a
			// check of the operations alone would pass whatever they did.
			r.Violations = append(r.Violations, Violation{SKU: sku, Rule: RuleLinearizable,
				Message: fmt.Sprintf("the final read has no row for this SKU (stock %d): no state explains the operations", x.stock[sku])})
			continue
		}
		ops, init := x.skuOperations(sku)
		left := time.Until(deadline)
		if left <= 0 {
			r.Undecided = append(r.Undecided, sku)
			continue
		}
		m := model(init)
		switch porcupine.CheckOperationsTimeout(m, ops, left) {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			r.Undecided = append(r.Undecided, sku)
			continue
		}
		msg := fmt.Sprintf("no order of the %d operations explains every answer (stock %d)", len(ops), x.stock[sku])
		// The verbose run repeats the search to collect the partial
		// linearizations; it gets what is left of the bound and no more
		// (porcupine takes a timeout of 0 as none at all).
		left = time.Until(deadline)
		if left <= 0 {
			msg += "\n(not explained: the time bound ran out)"
			r.Violations = append(r.Violations, Violation{SKU: sku, Rule: RuleLinearizable, Message: msg})
			continue
		}
		res, info := porcupine.CheckOperationsVerbose(m, ops, left)
		if res == porcupine.Illegal {
			msg += "\n" + explain(ops, init, info)
			if visualDir != "" {
				path := filepath.Join(visualDir, sku+".html")
				if err := porcupine.VisualizePath(m, info, path); err != nil {
					msg += fmt.Sprintf("\n(visualization not written: %v)", err)
				} else {
					msg += "\nvisualization: " + path
				}
			}
		}
		r.Violations = append(r.Violations, Violation{SKU: sku, Rule: RuleLinearizable, Message: msg})
	}
}

// skuOperations builds the porcupine history of one SKU and its initial
// state. Times are nanoseconds since the first invocation; an operation
// with an unknown outcome may take effect until just before the final read,
// unless the final read settles it (see settle).
func (x *index) skuOperations(sku string) ([]porcupine.Operation, state) {
	rel := func(t time.Time) int64 { return t.Sub(x.t0).Nanoseconds() }
	readAt := rel(x.final.At)
	orderIdx := map[int]int{} // place op → order index in state.st
	var ops []porcupine.Operation
	add := func(in input, out output, call, ret int64) {
		ops = append(ops, porcupine.Operation{ClientId: max(in.client, 0), Input: in, Call: call, Output: out, Return: ret})
	}
	// outcome is what the search takes op's answer to be, and when it
	// completed; ok is false for an operation the final read shows never
	// took effect, which the search leaves out.
	outcome := func(op Op) (out output, call, ret int64, ok bool) {
		call, ret = rel(op.Invoke), rel(op.Complete)
		out = output{result: op.Outcome.Result, code: op.Outcome.Code}
		if op.Outcome.Result != Unknown {
			return out, call, ret, true
		}
		ret = max(readAt-1, call)
		switch x.settle(op) {
		case OK:
			return output{result: OK, settled: true}, call, ret, true
		case Failed:
			return output{}, 0, 0, false
		}
		return out, call, ret, true
	}
	for i, op := range x.ops {
		if op.Kind != Place {
			continue
		}
		q := quantity(x.linesOf(i), sku)
		if q == 0 {
			continue
		}
		out, call, ret, ok := outcome(op)
		if !ok {
			continue
		}
		orderIdx[i] = len(orderIdx)
		out.insufficient = op.Outcome.Code == CodeInsufficientStock && op.Outcome.SKU == sku
		add(input{kind: Place, order: orderIdx[i], qty: q, label: x.label(i), client: op.Client}, out, call, ret)
	}
	init := state{avail: x.stock[sku], st: strings.Repeat(string(rune(stNone)), len(orderIdx))}
	expired := map[int]bool{}
	for _, op := range x.ops {
		if op.Kind == Place {
			continue
		}
		p, ok := x.placeOf[op.OrderID]
		idx, onSKU := orderIdx[p]
		if !ok || !onSKU {
			continue // an order nobody placed: checkTransitions reports it
		}
		if op.Kind == Expire && op.Outcome.Result == OK {
			expired[p] = true
		}
		out, call, ret, ok := outcome(op)
		if !ok {
			continue
		}
		add(input{kind: op.Kind, order: idx, qty: quantity(x.linesOf(p), sku), label: x.label(p), client: op.Client},
			out, call, ret)
	}
	read := init
	for p, idx := range orderIdx {
		id := x.orderID(p)
		o, ok := x.finalOrder(id)
		if !ok {
			continue
		}
		read.st = read.with(idx, statusLetter[o.Status])
		if o.Status == StatusExpired && !expired[p] {
			// The reaper's expiry, seen only in the final read: it happened
			// at an unknown moment after the hold's deadline.
			call := min(max(rel(o.ExpiresAt), 0), readAt-1)
			add(input{kind: Expire, order: idx, qty: quantity(x.linesOf(p), sku), label: x.label(p), client: -1},
				output{result: OK}, call, readAt-1)
		}
	}
	f, _ := x.finalSKU(sku) // checkLinearizable made sure it is there
	read.avail, read.held, read.sold = f.Available, f.Held, f.Sold
	add(input{kind: kindRead, client: -1}, output{result: OK, read: read}, readAt, readAt)
	// Reader and reaper are not clients; porcupine wants ids ≥ 0.
	maxClient := 0
	for _, op := range ops {
		maxClient = max(maxClient, op.ClientId)
	}
	for i := range ops {
		if ops[i].Input.(input).client < 0 {
			ops[i].ClientId = maxClient + 1
		}
		ops[i].Metadata = i
	}
	return ops, init
}

// settle decides, for the linearizability search alone, an Unknown
// operation that the final read decides: OK if it surely took effect,
// Failed if it surely did not, else Unknown. The other rules judge the
// history as recorded. Each Unknown left open may take effect at any moment
// up to the final read, which doubles the states porcupine carries, so a
// dozen on one SKU would leave it undecided within the bound. Settling is
// sound because the final read comes after every instance stopped, orders
// are never deleted, one key makes at most one order, and confirmed,
// cancelled and expired are final:
//   - a place whose key has no order in the final read never took effect;
//     one whose key has exactly one order did, before the read;
//   - a confirm (cancel, expire) of an order that ended otherwise never took
//     effect; a confirm of an order that ended confirmed either did, or,
//     taken as OK just before the read, changes nothing (confirming twice
//     answers 200), so OK until the read admits the same orders of
//     operations; likewise a cancel. An expire is not idempotent: it stays
//     Unknown.
func (x *index) settle(op Op) Result {
	if op.Kind == Place {
		if op.Key == "" {
			return Unknown
		}
		switch len(x.finalByKey[op.Key]) {
		case 0:
			return Failed
		case 1:
			return OK
		}
		return Unknown // a doubled key: checkOrders reports it
	}
	o, ok := x.finalOrder(op.OrderID)
	if !ok {
		return Unknown
	}
	final := map[Kind]string{Confirm: StatusConfirmed, Cancel: StatusCancelled, Expire: StatusExpired}[op.Kind]
	switch {
	case o.Status != final:
		return Failed
	case op.Kind == Expire:
		return Unknown
	}
	return OK
}

// orderID is the id of the order place operation i made, if known.
func (x *index) orderID(i int) string {
	op := x.ops[i]
	if op.Outcome.Result == OK {
		return op.Outcome.OrderID
	}
	if f := x.finalByKey[op.Key]; op.Key != "" && len(f) == 1 {
		return x.final.Orders[f[0]].ID
	}
	return ""
}

func (x *index) label(i int) string {
	if id := x.orderID(i); id != "" {
		return id
	}
	if k := x.ops[i].Key; k != "" {
		return fmt.Sprintf("key %q", k)
	}
	return fmt.Sprintf("#%d", i)
}

// explain renders the longest linearizable prefix porcupine found and why
// none of the operations that could come next fits: the first violating
// sub-history, in text.
func explain(ops []porcupine.Operation, init state, info porcupine.LinearizationInfo) string {
	var longest []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	var b strings.Builder
	states := []state{init}
	done := map[int]bool{}
	fmt.Fprintf(&b, "  longest linearizable prefix (%d of %d operations), state after each:\n", len(longest), len(ops))
	if len(longest) > maxPrefixLines {
		fmt.Fprintf(&b, "    … %d earlier steps\n", len(longest)-maxPrefixLines)
	}
	fmt.Fprintf(&b, "    start: %s\n", init)
	for n, op := range longest {
		done[op.Metadata.(int)] = true
		var next []state
		for _, s := range states {
			got, _ := step(s, op.Input.(input), op.Output.(output))
			next = appendNew(next, got...)
		}
		states = next
		if n >= len(longest)-maxPrefixLines {
			fmt.Fprintf(&b, "    %s  %s  ⇒ %s\n", span(op), describeOp(op.Input.(input), op.Output.(output)), describeStates(states))
		}
	}
	// The operations that could be linearized next: not done, invoked
	// before every other pending operation returned.
	first := int64(1<<63 - 1)
	for i, op := range ops {
		if !done[i] {
			first = min(first, op.Return)
		}
	}
	b.WriteString("  but none of these can come next:\n")
	shown := 0
	for i, op := range ops {
		if done[i] || op.Call > first {
			continue
		}
		if shown == maxCandidates {
			b.WriteString("    …\n")
			break
		}
		shown++
		why := "it fits here, but nothing can follow it"
		for _, s := range states {
			if got, reason := step(s, op.Input.(input), op.Output.(output)); len(got) == 0 {
				why = reason
				break
			}
		}
		fmt.Fprintf(&b, "    %s  %s: %s\n", span(op), describeOp(op.Input.(input), op.Output.(output)), why)
	}
	return strings.TrimRight(b.String(), "\n")
}

func appendNew(list []state, more ...state) []state {
	for _, s := range more {
		if !containsState(list, s) {
			list = append(list, s)
		}
	}
	return list
}

func containsState(list []state, s state) bool {
	for _, t := range list {
		if t == s {
			return true
		}
	}
	return false
}

func describeStates(states []state) string {
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = s.String()
	}
	return strings.Join(parts, " or ")
}

func span(op porcupine.Operation) string {
	return fmt.Sprintf("[%.3fs–%.3fs]", float64(op.Call)/1e9, float64(op.Return)/1e9)
}

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
		// linearizations; it gets what is left of the bound.
		res, info := porcupine.CheckOperationsVerbose(m, ops, max(time.Until(deadline), time.Second))
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
// with an unknown outcome may take effect until just before the final read.
func (x *index) skuOperations(sku string) ([]porcupine.Operation, state) {
	rel := func(t time.Time) int64 { return t.Sub(x.t0).Nanoseconds() }
	readAt := rel(x.final.At)
	orderIdx := map[int]int{} // place op → order index in state.st
	var ops []porcupine.Operation
	add := func(in input, out output, call, ret int64) {
		ops = append(ops, porcupine.Operation{ClientId: max(in.client, 0), Input: in, Call: call, Output: out, Return: ret})
	}
	span := func(op Op) (int64, int64) {
		if op.Outcome.Result == Unknown {
			return rel(op.Invoke), max(readAt-1, rel(op.Invoke))
		}
		return rel(op.Invoke), rel(op.Complete)
	}
	for i, op := range x.ops {
		if op.Kind != Place {
			continue
		}
		q := quantity(x.linesOf(i), sku)
		if q == 0 {
			continue
		}
		orderIdx[i] = len(orderIdx)
		out := output{result: op.Outcome.Result, code: op.Outcome.Code,
			insufficient: op.Outcome.Code == CodeInsufficientStock && op.Outcome.SKU == sku}
		call, ret := span(op)
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
		call, ret := span(op)
		add(input{kind: op.Kind, order: idx, qty: quantity(x.linesOf(p), sku), label: x.label(p), client: op.Client},
			output{result: op.Outcome.Result, code: op.Outcome.Code}, call, ret)
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

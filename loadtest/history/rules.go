package history

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// add records a violation on every SKU of lines (the first SKU alone would
// hide it from a per-SKU reader of the report).
func (r *Report) add(rule Rule, lines []Line, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	skus := skusOf(lines)
	if len(skus) == 0 {
		skus = []string{"?"}
	}
	for _, sku := range skus {
		r.Violations = append(r.Violations, Violation{SKU: sku, Rule: rule, Message: msg})
	}
}

// checkOrders: every acknowledged order exists exactly once with its lines,
// one key never made two orders, every order was placed by someone, and
// with the lines it asked for (all or none: an acknowledgement or a stored
// order with fewer lines, or other quantities, is a violation).
func (x *index) checkOrders(r *Report) {
	for i, op := range x.ops {
		if op.Kind != Place || op.Outcome.Result != OK {
			continue
		}
		id := op.Outcome.OrderID
		// An acknowledgement recorded without its lines says nothing of
		// them; the final read's are checked below.
		if len(op.Outcome.Lines) > 0 && !sameLines(op.Outcome.Lines, op.Lines) {
			r.add(RuleOrders, append(slices.Clone(op.Lines), op.Outcome.Lines...),
				"order %s acknowledged with lines %s, asked for %s (%s)",
				id, formatLines(op.Outcome.Lines), formatLines(op.Lines), x.describeOperation(i))
		}
		switch f := x.finalByID[id]; len(f) {
		case 0:
			r.add(RuleOrders, x.linesOf(i), "acknowledged order %s is missing from the final read (%s)", id, x.describeOperation(i))
		case 1:
			got := x.final.Orders[f[0]].Lines
			if !sameLines(got, x.linesOf(i)) {
				r.add(RuleOrders, append(slices.Clone(got), x.linesOf(i)...),
					"acknowledged order %s has lines %s in the final read, acknowledged with %s (%s)",
					id, formatLines(got), formatLines(x.linesOf(i)), x.describeOperation(i))
			}
		default:
			r.add(RuleOrders, x.linesOf(i), "acknowledged order %s appears %d times in the final read (%s)", id, len(f), x.describeOperation(i))
		}
	}
	keys := make([]string, 0, len(x.finalByKey))
	for k := range x.finalByKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f := x.finalByKey[k]
		if len(f) < 2 {
			continue
		}
		var ids []string
		var lines []Line
		for _, j := range f {
			ids = append(ids, x.final.Orders[j].ID)
			lines = append(lines, x.final.Orders[j].Lines...)
		}
		who := "no recorded operation"
		if p, ok := x.placeByKey[k]; ok {
			who = x.describeOperation(p)
		}
		r.add(RuleOrders, lines, "one placement made %d orders: key %q has orders %s in the final read (%s)",
			len(f), k, strings.Join(ids, ", "), who)
	}
	for _, o := range x.final.Orders {
		if p, ok := x.placeOf[o.ID]; ok {
			if asked := x.ops[p].Lines; !sameLines(o.Lines, asked) {
				r.add(RuleOrders, append(slices.Clone(asked), o.Lines...),
					"order %s has lines %s in the final read, asked for %s (%s)",
					o.ID, formatLines(o.Lines), formatLines(asked), x.describeOperation(p))
			}
			continue
		}
		if _, ok := x.placeByKey[o.Key]; ok && o.Key != "" {
			continue // a doubled key, reported above
		}
		r.add(RuleOrders, o.Lines, "order %s (key %q, %s %s) in the final read was placed by no recorded operation",
			o.ID, o.Key, o.Status, formatLines(o.Lines))
	}
}

// returnedOrders is the set of orders whose units went back to stock: an
// acknowledged cancel, or a final status of cancelled or expired.
func (x *index) returnedOrders() map[string]bool {
	out := map[string]bool{}
	for _, o := range x.final.Orders {
		if (o.Status == StatusCancelled || o.Status == StatusExpired) && len(x.finalByID[o.ID]) == 1 {
			out[o.ID] = true
		}
	}
	for _, op := range x.ops {
		if op.Kind == Cancel && op.Outcome.Result == OK {
			out[op.OrderID] = true
		}
	}
	return out
}

// checkUnits: the units of acknowledged orders that did not go back to
// stock never exceed the SKU's stock. One pass sums every SKU, so that the
// rule stays linear in the history; only an oversold SKU's orders are
// listed.
func (x *index) checkUnits(r *Report) {
	returned := x.returnedOrders()
	outstanding := func(op Op) bool {
		return op.Kind == Place && op.Outcome.Result == OK && !returned[op.Outcome.OrderID]
	}
	units := map[string]int64{}
	for i, op := range x.ops {
		if outstanding(op) {
			for _, l := range x.linesOf(i) {
				units[l.SKU] += l.Quantity
			}
		}
	}
	for _, sku := range x.skus {
		if units[sku] <= x.stock[sku] {
			continue
		}
		var orders []string
		for i, op := range x.ops {
			if !outstanding(op) {
				continue
			}
			if q := quantity(x.linesOf(i), sku); q > 0 {
				orders = append(orders, fmt.Sprintf("%s ×%d (client %d, %s–%s)",
					op.Outcome.OrderID, q, op.Client, x.rel(op.Invoke), x.rel(op.Complete)))
			}
		}
		r.Violations = append(r.Violations, Violation{SKU: sku, Rule: RuleUnits, Message: fmt.Sprintf(
			"oversold: %d units acknowledged and never returned, stock %d: %s",
			units[sku], x.stock[sku], strings.Join(orders, "; "))})
	}
}

// checkTransitions: confirm and cancel act on orders someone placed, an
// order is never both confirmed and cancelled, and the final status agrees
// with the acknowledged transitions.
func (x *index) checkTransitions(r *Report) {
	type acts struct{ confirmed, cancelled, expired, mayConfirm, mayCancel []int }
	byOrder := map[string]*acts{}
	var ids []string
	for i, op := range x.ops {
		if op.Kind == Place {
			continue
		}
		a := byOrder[op.OrderID]
		if a == nil {
			a = &acts{}
			byOrder[op.OrderID] = a
			ids = append(ids, op.OrderID)
		}
		ok, maybe := op.Outcome.Result == OK, op.Outcome.Result == Unknown
		switch {
		case op.Kind == Confirm && ok:
			a.confirmed = append(a.confirmed, i)
		case op.Kind == Confirm && maybe:
			a.mayConfirm = append(a.mayConfirm, i)
		case op.Kind == Cancel && ok:
			a.cancelled = append(a.cancelled, i)
		case op.Kind == Cancel && maybe:
			a.mayCancel = append(a.mayCancel, i)
		case op.Kind == Expire && ok:
			a.expired = append(a.expired, i)
		}
	}
	for _, o := range x.final.Orders {
		if byOrder[o.ID] == nil {
			byOrder[o.ID] = &acts{}
			ids = append(ids, o.ID)
		}
	}
	for _, id := range ids {
		a := byOrder[id]
		final, inFinal := x.finalOrder(id)
		var lines []Line
		if p, ok := x.placeOf[id]; ok {
			lines = x.linesOf(p)
		} else if inFinal {
			lines = final.Lines
		}
		acked := len(a.confirmed) + len(a.cancelled) + len(a.expired)
		if _, placed := x.placeOf[id]; !placed && !inFinal && acked > 0 {
			first := slices.Concat(a.confirmed, a.cancelled, a.expired)[0]
			r.add(RuleTransitions, lines, "order %s was never placed, yet %s", id, x.describeOperation(first))
			continue
		}
		kinds := 0
		for _, l := range [][]int{a.confirmed, a.cancelled, a.expired} {
			if len(l) > 0 {
				kinds++
			}
		}
		if kinds > 1 {
			var what []string
			for _, i := range slices.Concat(a.confirmed, a.cancelled, a.expired) {
				what = append(what, x.describeOperation(i))
			}
			r.add(RuleTransitions, lines, "order %s went two ways: %s", id, strings.Join(what, "; "))
			continue
		}
		if !inFinal {
			continue // a missing order is reported by checkOrders
		}
		want := ""
		switch {
		case len(a.confirmed) > 0:
			want = StatusConfirmed
		case len(a.cancelled) > 0:
			want = StatusCancelled
		case len(a.expired) > 0:
			want = StatusExpired
		}
		switch {
		case want != "" && final.Status != want:
			r.add(RuleTransitions, lines, "order %s was acknowledged %s but the final read says %s", id, want, final.Status)
		case want == "" && final.Status == StatusConfirmed && len(a.mayConfirm) == 0:
			r.add(RuleTransitions, lines, "order %s is confirmed, but nobody asked to confirm it", id)
		case want == "" && final.Status == StatusCancelled && len(a.mayCancel) == 0:
			r.add(RuleTransitions, lines, "order %s is cancelled, but nobody asked to cancel it", id)
		case final.Status == StatusExpired && final.ExpiresAt.After(x.final.At):
			r.add(RuleTransitions, lines, "order %s expired before its hold ran out (expires_at %s, read at %s)",
				id, final.ExpiresAt.Format("15:04:05.000"), x.final.At.Format("15:04:05.000"))
		}
	}
}

// checkTokens: the fence tokens the store accepted never decrease in real
// time. Under the fence a SKU row's token only rises (a claim with a lower
// token, or an equal one of another lease, matches no row) and each line
// is written under its row's token; so an order placed after another's
// placement was acknowledged has, on each SKU they share, a token at least
// as high. Orders that overlap may be written in either order and are not
// compared; equal tokens are fine (one batch's orders share a lease), so
// backends that issue none (0 everywhere) never break it. A sort per SKU
// and one sweep with a running maximum keep it O(n log n).
func (x *index) checkTokens(r *Report) {
	type placement struct {
		op    int
		at    time.Time // when acknowledged, or when invoked
		token uint64
	}
	acked := map[string][]placement{}   // acknowledged: from their completion on, a floor
	invoked := map[string][]placement{} // took effect: judged from their invocation
	for i, op := range x.ops {
		if op.Kind != Place {
			continue
		}
		for _, l := range x.acceptedLines(i) {
			if op.Outcome.Result == OK {
				acked[l.SKU] = append(acked[l.SKU], placement{i, op.Complete, l.Token})
			}
			invoked[l.SKU] = append(invoked[l.SKU], placement{i, op.Invoke, l.Token})
		}
	}
	byTime := func(a, b placement) int { return a.at.Compare(b.at) }
	for _, sku := range x.skus {
		floors, placed := acked[sku], invoked[sku]
		slices.SortStableFunc(floors, byTime)
		slices.SortStableFunc(placed, byTime)
		var high *placement // the highest token acknowledged so far
		next := 0
		for _, b := range placed {
			for ; next < len(floors) && floors[next].at.Before(b.at); next++ {
				if high == nil || floors[next].token > high.token {
					high = &floors[next]
				}
			}
			if high == nil || b.token >= high.token {
				continue
			}
			r.Violations = append(r.Violations, Violation{SKU: sku, Rule: RuleTokens, Message: fmt.Sprintf(
				"order %s, invoked at %s, was written with token %d, below token %d of order %s, acknowledged at %s: "+
					"the store accepted a stale lease's write (%s; earlier %s)",
				x.label(b.op), x.rel(b.at), b.token, high.token, x.label(high.op), x.rel(high.at),
				x.describeOperation(b.op), x.describeOperation(high.op))})
		}
	}
}

// acceptedLines returns the lines, with their tokens, of the order place
// operation i made, if it took effect: as acknowledged, else as the final
// read found it (an Unknown place whose key made one order took effect).
// Nil for a place that failed, or whose order no source shows with its
// tokens (checkOrders reports an acknowledged order gone missing).
func (x *index) acceptedLines(i int) []Line {
	op := x.ops[i]
	switch {
	case op.Outcome.Result == Failed:
		return nil
	case op.Outcome.Result == OK && len(op.Outcome.Lines) > 0:
		return op.Outcome.Lines
	}
	if o, ok := x.finalOrder(x.orderID(i)); ok {
		return o.Lines
	}
	return nil
}

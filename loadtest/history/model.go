package history

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Status letters of one order in the model's state.
const (
	stNone      = '-' // not placed
	stReserved  = 'R'
	stConfirmed = 'C'
	stCancelled = 'X'
	stExpired   = 'E'
)

var statusLetter = map[string]byte{
	StatusReserved: stReserved, StatusConfirmed: stConfirmed,
	StatusCancelled: stCancelled, StatusExpired: stExpired,
}

// state is one SKU: its counters and the status of each order with a line
// on it (byte i is order i). It is a comparable value, so porcupine's
// default equality and the checker's cache work on it.
type state struct {
	avail, held, sold int64
	st                string
}

func (s state) String() string {
	return fmt.Sprintf("available %d, held %d, sold %d", s.avail, s.held, s.sold)
}

func (s state) with(order int, letter byte) string {
	b := []byte(s.st)
	b[order] = letter
	return string(b)
}

// kindRead is the final read, which only the checker adds.
const kindRead Kind = 100

// input is one operation as it touches one SKU.
type input struct {
	kind   Kind
	order  int   // index of the order in state.st
	qty    int64 // the order's quantity of this SKU
	label  string
	client int
}

// output is its answer; for the final read, the state read.
type output struct {
	result       Result
	code         string
	insufficient bool // an insufficient_stock failure naming this SKU
	settled      bool // recorded Unknown, OK by the final read (settle)
	read         state
}

// step returns every state the operation can lead to from s with this
// answer, or none and the reason it cannot happen.
func step(s state, in input, out output) ([]state, string) {
	if in.kind == kindRead {
		if s != out.read {
			if s.st == out.read.st {
				return nil, fmt.Sprintf("the final read (%s) does not match the model (%s)", out.read, s)
			}
			// Letters per order in placement order: - not placed, R reserved,
			// C confirmed, X cancelled, E expired.
			return nil, fmt.Sprintf("the final read (%s, orders %s) does not match the model (%s, orders %s; -RCXE = not placed, reserved, confirmed, cancelled, expired)",
				out.read, out.read.st, s, s.st)
		}
		return []state{s}, ""
	}
	applied, why := apply(s, in)
	switch out.result {
	case OK:
		if why != "" {
			return nil, "acknowledged, but " + why
		}
		return []state{applied}, ""
	case Unknown:
		if why != "" {
			return []state{s}, ""
		}
		return []state{s, applied}, ""
	}
	// A definite failure changed nothing; some codes also say why, and the
	// state must agree.
	switch {
	case out.insufficient && in.kind == Place && s.avail >= in.qty:
		return nil, fmt.Sprintf("refused for insufficient stock, but %d were available for %d", s.avail, in.qty)
	case out.code == CodeInvalidTransition && why == "":
		return nil, fmt.Sprintf("refused as an invalid transition, but order %s was %s", in.label, describe(s.st[in.order]))
	}
	return []state{s}, ""
}

// apply is the sequential specification of one operation that succeeds;
// why says what forbids it.
func apply(s state, in input) (state, string) {
	o := s.st[in.order]
	switch in.kind {
	case Place:
		if o != stNone {
			return s, fmt.Sprintf("order %s was already placed", in.label)
		}
		if s.avail < in.qty {
			return s, fmt.Sprintf("it needs %d available and %d are", in.qty, s.avail)
		}
		return state{s.avail - in.qty, s.held + in.qty, s.sold, s.with(in.order, stReserved)}, ""
	case Confirm:
		switch o {
		case stConfirmed:
			return s, "" // confirming twice answers 200 and changes nothing
		case stReserved:
			return state{s.avail, s.held - in.qty, s.sold + in.qty, s.with(in.order, stConfirmed)}, ""
		}
	case Cancel:
		switch o {
		case stCancelled:
			return s, ""
		case stReserved:
			return state{s.avail + in.qty, s.held - in.qty, s.sold, s.with(in.order, stCancelled)}, ""
		}
	case Expire:
		if o == stReserved {
			return state{s.avail + in.qty, s.held - in.qty, s.sold, s.with(in.order, stExpired)}, ""
		}
	}
	return s, fmt.Sprintf("order %s was %s", in.label, describe(o))
}

func describe(letter byte) string {
	switch letter {
	case stNone:
		return "not placed"
	case stReserved:
		return StatusReserved
	case stConfirmed:
		return StatusConfirmed
	case stCancelled:
		return StatusCancelled
	case stExpired:
		return StatusExpired
	}
	return "in an unknown state"
}

// model is the porcupine model of one SKU starting from init.
func model(init state) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{init} },
		Step: func(st, in, out interface{}) []interface{} {
			next, _ := step(st.(state), in.(input), out.(output))
			res := make([]interface{}, len(next))
			for i, n := range next {
				res[i] = n
			}
			return res
		},
		DescribeOperation: func(in, out interface{}) string { return describeOp(in.(input), out.(output)) },
		DescribeState:     func(st interface{}) string { return st.(state).String() },
	}
	return nm.ToModel()
}

func describeOp(in input, out output) string {
	if in.kind == kindRead {
		return fmt.Sprintf("final read: %s", out.read)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "client %d %s %s ×%d → %s", in.client, in.kind, in.label, in.qty, out.result)
	if out.settled {
		b.WriteString(" (unknown; the final read says it took effect)")
	}
	if out.code != "" {
		fmt.Fprintf(&b, " %s", out.code)
	}
	return b.String()
}

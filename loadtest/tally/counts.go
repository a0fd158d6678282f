package tally

import (
	"encoding/json"

	"github.com/stockguard/stockguard/loadtest/client"
)

// OrderCounts counts every order sent by its outcome. run counts the final
// outcome — the first answer, unless the deliberate same-key retry or the
// reconciliation after the run settled the order otherwise — so that
// Reserved is the orders the service did reserve, and keeps the first
// answers in FirstAnswers; chaos counts the one answer each order got. An
// order whose outcome stayed unknown counts among Errors, under the code
// of its last answer.
type OrderCounts struct {
	Sent            int            `json:"sent"`
	Reserved        int            `json:"reserved"`
	Insufficient    int            `json:"insufficient"`
	StaleFence      int            `json:"stale_fence"`
	LockUnavailable int            `json:"lock_unavailable"`
	Errors          int            `json:"errors"`
	ErrorCodes      map[string]int `json:"error_codes"`
	// FirstAnswers counts the first answer to every order sent, which
	// differs from the final outcome where an order had to be asked again
	// (a lost answer, a 5xx, a retry that settled it); nil when the
	// counter did not keep them apart.
	FirstAnswers *AnswerCounts `json:"first_answers,omitempty"`
	// Unsent orders were generated but not sent before the run's timeout.
	Unsent int `json:"unsent"`
	// Retries counts deliberate same-key resends, each in exactly one of
	// the four that follow. RetryReplayed those that answered as the first
	// did (a 201 with the first order id, or the same refusal);
	// RetryMismatch those that contradict a definite first answer (a 201
	// followed by another order id or a refusal, or a refusal followed by
	// another definite answer, such as an insufficient_stock then a 201,
	// which a run whose stock never grows rules out); RetryUnsettled those whose answer
	// settled nothing (no answer, the key in flight, a 5xx or, after any
	// first answer but a 201, a stale_fence: a 503 sheds the retry, it does
	// not contradict the first answer); RetrySettled those that settled an
	// order the first answer left open (no answer, the key in flight, a
	// 5xx or a stale_fence).
	Retries        int `json:"retries"`
	RetryReplayed  int `json:"retry_replayed"`
	RetryMismatch  int `json:"retry_mismatch"`
	RetryUnsettled int `json:"retry_unsettled"`
	RetrySettled   int `json:"retry_settled"`
	// Reconciled counts orders without an answer that were resent with the
	// same key after the run to learn their outcome; Unresolved those whose
	// outcome stayed unknown.
	Reconciled int `json:"reconciled"`
	Unresolved int `json:"unresolved"`
}

// Add counts one order sent and its outcome. ErrorCodes must not be nil.
func (o *OrderCounts) Add(kind client.Kind, code string) {
	o.Sent++
	switch kind {
	case client.KindReserved:
		o.Reserved++
	case client.KindInsufficient:
		o.Insufficient++
	case client.KindStaleFence:
		o.StaleFence++
	case client.KindLockUnavailable:
		o.LockUnavailable++
	default:
		o.Errors++
		o.ErrorCodes[code]++
	}
}

// AnswerCounts counts orders by the kind of one answer to each.
type AnswerCounts struct {
	Reserved        int            `json:"reserved"`
	Insufficient    int            `json:"insufficient"`
	StaleFence      int            `json:"stale_fence"`
	LockUnavailable int            `json:"lock_unavailable"`
	Errors          int            `json:"errors"`
	ErrorCodes      map[string]int `json:"error_codes"`
}

// Add counts one answer. ErrorCodes must not be nil.
func (a *AnswerCounts) Add(kind client.Kind, code string) {
	switch kind {
	case client.KindReserved:
		a.Reserved++
	case client.KindInsufficient:
		a.Insufficient++
	case client.KindStaleFence:
		a.StaleFence++
	case client.KindLockUnavailable:
		a.LockUnavailable++
	default:
		a.Errors++
		a.ErrorCodes[code]++
	}
}

// UnitCounts is the unit arithmetic of a run.
type UnitCounts struct {
	Stock    int64 `json:"stock"`
	Reserved int64 `json:"reserved"`
	Oversold int64 `json:"oversold"`
	Lost     int64 `json:"lost"`
	// Unverified marks a run stopped before its verification: Reserved is
	// what the client's receipts hold, and Oversold and Lost, which nothing
	// checked, are written as null rather than as a reassuring 0.
	Unverified bool `json:"unverified,omitempty"`
}

// MarshalJSON writes oversold and lost as null when they were not verified.
func (u UnitCounts) MarshalJSON() ([]byte, error) {
	type plain UnitCounts
	if !u.Unverified {
		return json.Marshal(plain(u))
	}
	// The outer fields hide plain's of the same name, one level deeper.
	return json.Marshal(struct {
		plain
		Oversold *int64 `json:"oversold"`
		Lost     *int64 `json:"lost"`
	}{plain: plain(u)})
}

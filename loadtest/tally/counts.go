package tally

import "github.com/stockguard/stockguard/loadtest/client"

// OrderCounts counts the first answer to every order sent, by kind.
type OrderCounts struct {
	Sent            int            `json:"sent"`
	Reserved        int            `json:"reserved"`
	Insufficient    int            `json:"insufficient"`
	StaleFence      int            `json:"stale_fence"`
	LockUnavailable int            `json:"lock_unavailable"`
	Errors          int            `json:"errors"`
	ErrorCodes      map[string]int `json:"error_codes"`
	// Unsent orders were generated but not sent before the run's timeout.
	Unsent int `json:"unsent"`
	// Retries counts deliberate same-key resends; RetryReplayed those that
	// answered as the first did (a 201 with the first order id),
	// RetryMismatch those where a 201 was followed by another order id or a
	// refusal, RetryUnsettled those whose answer settled nothing (no answer,
	// the key in flight, or a 5xx: a 503 sheds the retry, it does not
	// contradict the first answer).
	Retries        int `json:"retries"`
	RetryReplayed  int `json:"retry_replayed"`
	RetryMismatch  int `json:"retry_mismatch"`
	RetryUnsettled int `json:"retry_unsettled"`
	// Reconciled counts orders without an answer that were resent with the
	// same key after the run to learn their outcome; Unresolved those whose
	// outcome stayed unknown.
	Reconciled int `json:"reconciled"`
	Unresolved int `json:"unresolved"`
}

// Add counts one order sent and its first answer. ErrorCodes must not be nil.
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

// UnitCounts is the unit arithmetic of a run.
type UnitCounts struct {
	Stock    int64 `json:"stock"`
	Reserved int64 `json:"reserved"`
	Oversold int64 `json:"oversold"`
	Lost     int64 `json:"lost"`
}

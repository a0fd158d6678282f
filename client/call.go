package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// maxAnswer bounds how much of an answer is read; the API's largest (an
// order of 100 lines, or /metrics, whose labels are all bounded: about
// 13 KiB after a few hundred orders) is far below it. A success answer
// beyond it is an error, never a silent cut: /metrics is returned as read.
const maxAnswer = 1 << 20

// maxAnswerHeader bounds an answer's headers in the default transport
// (net/http's own bound is 10 MiB); the service's come to a few hundred
// bytes. Longer headers are an attempt that got no answer.
const maxAnswerHeader = 64 << 10

// Attempt is one HTTP exchange of a call, as reported to an Observer.
type Attempt struct {
	// Op is the API operation (its operationId in api/openapi.yaml, such
	// as "placeOrder").
	Op string
	// N counts the call's attempts from 1.
	N int
	// Status is the answer's HTTP status; 0 when none came.
	Status int
	// Code is the error code of an error answer, "" otherwise.
	Code string
	// Err is the attempt's error: an *APIError, a transport error, or nil.
	Err error
	// Duration is the exchange's time, waits between attempts excluded.
	Duration time.Duration
	// Retry tells whether the call will try again after this attempt.
	Retry bool
}

// Observer is called after every attempt, from the calling goroutine. A
// load tester counts answers with it: with retries on, a caller sees only a
// call's last answer, the observer sees them all.
type Observer func(Attempt)

// Header values every request shares. net/http only reads them, and an
// Add to a one-element slice of capacity one copies it, so no request can
// change another's; sharing them saves two allocations a request.
var (
	acceptJSON  = []string{"application/json"}
	contentJSON = []string{"application/json"}
	// acceptText asks /metrics for the text exposition format.
	acceptText = []string{"text/plain"}
)

// answer is a typed success answer, which tells whether it has what every
// such answer of the API has.
type answer interface {
	valid() error
}

// call is one API operation.
type call struct {
	op     string
	method string
	path   string
	body   []byte // nil: no body
	header http.Header
	// key is the Idempotency-Key header, "" for none: a field rather than
	// a header map, as an order sends it on every request.
	key  string
	want int  // the success status
	out  any  // decoded from a success answer; nil to ignore it
	raw  bool // out is a *[]byte that gets the success answer as sent
	once bool // never retried
	// unwrittenOnly retries the call only after an answer that says
	// nothing was written: a repeat of one that landed would apply it
	// again.
	unwrittenOnly bool
}

// callError is a call's failure. Its message is built only when asked for:
// a load generator counts refused orders by the million and reads few
// messages.
type callError struct {
	op       string
	attempts int // 0: err tells them itself
	err      error
	// key is the Idempotency-Key every attempt carried, "" for none: after
	// an unknown outcome it is the only way to learn the order's fate, and
	// PlaceOrder may have made it (IdempotencyKeyOf).
	key string
	// unknown is set when the call may have been applied (ErrOutcomeUnknown).
	unknown bool
}

func (e *callError) Error() string {
	s := "client: " + e.op + ": "
	if e.attempts > 1 {
		s += fmt.Sprintf("%d attempts: ", e.attempts)
	}
	if e.unknown {
		s += "outcome unknown: "
	}
	return s + e.err.Error()
}

// Unwrap returns the last attempt's error alone, ErrOutcomeUnknown being
// matched by Is: a single chain keeps the *APIError one unwrap away for
// those who walk it without errors.As.
func (e *callError) Unwrap() error { return e.err }

// Is matches ErrOutcomeUnknown when the call may have been applied.
func (e *callError) Is(target error) bool { return e.unknown && target == ErrOutcomeUnknown }

// answered is what do learnt of a call besides its error.
type answered struct {
	// header is the last answer's header.
	header http.Header
	// lostBefore is true when an attempt before the last may have been
	// applied without the client learning it: it got no answer, or none it
	// could read, or a 503 that does not say nothing was written
	// (store_unavailable, timeout: a commit whose acknowledgement was lost).
	lostBefore bool
}

// mayHaveApplied tells whether an attempt that failed with err may
// nonetheless have been applied by the service. Only answers that say
// nothing was written rule it out: a 503 lock_unavailable or overloaded,
// a 409 idempotency_key_in_flight (another request with the key runs), any
// other 4xx (refused on its input or state).
func mayHaveApplied(err error) bool {
	ae, _ := err.(*APIError)
	switch {
	case ae == nil: // no answer, or a success status with a body unread
		return !errors.Is(err, errUnsendable)
	case ae.Status == http.StatusServiceUnavailable:
		return !ae.unwritten()
	default:
		return ae.Status >= 500
	}
}

// outcomeUnknown tells whether cl, whose last attempt failed with err, may
// have been applied all the same (ErrOutcomeUnknown): that attempt may
// have been, or the key's first request still runs, or an earlier attempt
// may have been (lostBefore) and err does not settle it. A read writes
// nothing to be unknown.
func (cl call) outcomeUnknown(err error, lostBefore bool) bool {
	if cl.method == http.MethodGet {
		return false
	}
	if mayHaveApplied(err) {
		return true
	}
	ae, _ := err.(*APIError)
	if ae == nil { // not sent
		return false
	}
	return ae.Code == ErrIdempotencyKeyInFlight.Error() || lostBefore && !ae.settles()
}

// do runs c's attempts until one succeeds, one fails for good, the retries
// are spent or ctx is done.
func (c *Client) do(ctx context.Context, cl call) (answered, error) {
	r := retries{left: c.retries}
	var a answered
	for n := 1; ; n++ {
		start := time.Now()
		status, header, err := c.attempt(ctx, cl)
		a.header = header
		wait, retry := c.retryWait(cl, err, &r)
		retry = retry && ctx.Err() == nil
		if c.observer != nil {
			at := Attempt{Op: cl.op, N: n, Status: status, Err: err, Duration: time.Since(start), Retry: retry}
			if ae, ok := err.(*APIError); ok {
				at.Code = ae.Code
			}
			c.observer(at)
		}
		if err == nil {
			return a, nil
		}
		if !retry {
			return a, &callError{op: cl.op, attempts: n, err: err, key: cl.key, unknown: cl.outcomeUnknown(err, a.lostBefore)}
		}
		a.lostBefore = a.lostBefore || mayHaveApplied(err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return a, &callError{op: cl.op, key: cl.key, unknown: cl.outcomeUnknown(err, a.lostBefore),
				err: fmt.Errorf("%w (after %d attempts, the last: %w)", ctx.Err(), n, err)}
		case <-t.C:
		}
	}
}

// retries is what a call has used of its retries.
type retries struct {
	// left counts the retries left after a 503 or no answer.
	left int
	// backoffs and inFlight count the backoffs so far after no answer (or
	// a 503 without Retry-After) and after a key in flight.
	backoffs, inFlight int
	// inFlightUntil ends the waits for a key in flight; set by the first.
	inFlightUntil time.Time
}

// errUnsendable marks a request that could not be built: no attempt can
// send it, so it is not retried as one that got no answer.
var errUnsendable = errors.New("request not built")

// retryWait says whether err may pass on a later attempt and how long to
// wait first: a 503's Retry-After; for a key in flight (which has none) or
// an attempt that got no answer, a backoff that doubles each time. A
// request that could not be built, and one of a call that must not be
// repeated once it may have written, are final. Whether the caller's
// context ended is do's to judge (ctx.Err()), not err's: a transport's own
// timeouts (the dial's, http.Client.Timeout) match
// context.DeadlineExceeded too, and they are attempts that got no answer.
func (c *Client) retryWait(cl call, err error, r *retries) (time.Duration, bool) {
	if err == nil || cl.once || c.retries == 0 || errors.Is(err, errUnsendable) {
		return 0, false
	}
	backoff := func(k *int) time.Duration {
		d := c.inFlightBackoff << min(*k, 16)
		*k++
		return d
	}
	// attempt answers an *APIError as it is, never wrapped: a type
	// assertion finds it without errors.As, whose target would escape to
	// the heap on every call.
	ae, _ := err.(*APIError)
	if cl.unwrittenOnly && (ae == nil || !ae.unwritten()) {
		return 0, false
	}
	if ae != nil && ae.Code == ErrIdempotencyKeyInFlight.Error() {
		// Waited out by time, not by the retries: the first request may
		// run its whole lock wait, far longer than a few backoffs.
		now := time.Now()
		if r.inFlightUntil.IsZero() {
			r.inFlightUntil = now.Add(c.inFlightWait)
		}
		left := r.inFlightUntil.Sub(now)
		if left <= 0 {
			return 0, false
		}
		return min(backoff(&r.inFlight), maxInFlightBackoff, left), true
	}
	if ae != nil && !ae.retryable() || r.left == 0 {
		return 0, false
	}
	r.left--
	var wait time.Duration
	if ae != nil && ae.RetryAfter > 0 {
		wait = ae.RetryAfter
	} else {
		wait = backoff(&r.backoffs)
	}
	return min(wait, c.maxRetryWait), true
}

// attempt is one exchange: an *APIError for an error answer.
func (c *Client) attempt(ctx context.Context, cl call) (int, http.Header, error) {
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	// cl.path is escaped already: joined as text, not through url.URL.Path.
	req, err := http.NewRequestWithContext(ctx, cl.method, c.baseURL+cl.path, body)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", errUnsendable, err)
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if cl.key != "" {
		req.Header["Idempotency-Key"] = []string{cl.key}
		// net/http's Transport takes an Idempotency-Key as leave to resend
		// a request whose answer a reused connection lost, on its own: do
		// would never learn that the first send may have placed the order,
		// and would read the resend's replay as an earlier call's order. A
		// body it cannot rewind makes the Transport return the loss to do
		// instead, which counts it. A keyed request without a body is an
		// order the service refuses unread (400 or 415), so a resend of it
		// can place nothing. It also keeps http.Client from following a 307
		// or 308 with the order: that answer is the call's error.
		req.GetBody = nil
	}
	if cl.body != nil {
		req.Header["Content-Type"] = contentJSON
	}
	req.Header["Accept"] = acceptJSON
	if cl.raw {
		req.Header["Accept"] = acceptText
	}
	res, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil {
		return res.StatusCode, res.Header, fmt.Errorf("read answer: %w", err)
	}
	if res.StatusCode == cl.want {
		if len(raw) > maxAnswer {
			return res.StatusCode, res.Header, fmt.Errorf("%w: %d answer longer than %d bytes", ErrBadAnswer, res.StatusCode, maxAnswer)
		}
		switch {
		case cl.raw:
			*cl.out.(*[]byte) = raw
		case cl.out != nil:
			if err := json.Unmarshal(raw, cl.out); err != nil {
				return res.StatusCode, res.Header, fmt.Errorf("%w: decode %d answer: %w", ErrBadAnswer, res.StatusCode, err)
			}
			// null and {} decode without error into an answer with nothing
			// in it, such as an order without an id.
			if a, ok := cl.out.(answer); ok {
				if err := a.valid(); err != nil {
					return res.StatusCode, res.Header, fmt.Errorf("%w: %d answer: %w", ErrBadAnswer, res.StatusCode, err)
				}
			}
		}
		return res.StatusCode, res.Header, nil
	}
	return res.StatusCode, res.Header, apiError(res, raw)
}

func apiError(res *http.Response, raw []byte) *APIError {
	e := &APIError{Status: res.StatusCode, Header: res.Header, RequestID: res.Header.Get("X-Request-Id"),
		RetryAfter: parseRetryAfter(res.Header.Get("Retry-After"), time.Now())}
	var b errorBody
	if json.Unmarshal(raw, &b) == nil && b.Error.Code != "" {
		e.Code, e.Message, e.SKU = b.Error.Code, b.Error.Message, b.Error.SKU
		e.Requested, e.Available = b.Error.Requested, b.Error.Available
		if b.Error.RequestID != "" {
			e.RequestID = b.Error.RequestID
		}
		return e
	}
	e.Message = http.StatusText(res.StatusCode)
	return e
}

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
// order of 100 lines) is a few KiB.
const maxAnswer = 1 << 20

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

// call is one API operation.
type call struct {
	op     string
	method string
	path   string
	body   []byte // nil: no body
	header http.Header
	want   int  // the success status
	out    any  // decoded from a success answer; nil to ignore it
	once   bool // never retried
}

// do runs c's attempts until one succeeds, one fails for good, the retries
// are spent or ctx is done; it returns the last answer's header.
func (c *Client) do(ctx context.Context, cl call) (http.Header, error) {
	inFlight, noAnswer := 0, 0
	for n := 1; ; n++ {
		start := time.Now()
		status, header, err := c.attempt(ctx, cl)
		wait, retry := c.retryWait(err, &inFlight, &noAnswer)
		retry = retry && !cl.once && n <= c.retries && ctx.Err() == nil
		if c.observer != nil {
			a := Attempt{Op: cl.op, N: n, Status: status, Err: err, Duration: time.Since(start), Retry: retry}
			if ae := (*APIError)(nil); errors.As(err, &ae) {
				a.Code = ae.Code
			}
			c.observer(a)
		}
		if err == nil {
			return header, nil
		}
		if !retry {
			if n > 1 {
				return header, fmt.Errorf("client: %s: %d attempts: %w", cl.op, n, err)
			}
			return header, fmt.Errorf("client: %s: %w", cl.op, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return header, fmt.Errorf("client: %s: %w (after %d attempts, the last: %w)", cl.op, ctx.Err(), n, err)
		case <-t.C:
		}
	}
}

// retryWait says whether err may pass on a later attempt and how long to
// wait first: a 503's Retry-After; for a key in flight (which has none) or
// an attempt that got no answer, a backoff that doubles each time.
func (c *Client) retryWait(err error, inFlight, noAnswer *int) (time.Duration, bool) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return 0, false
	}
	backoff := func(k *int) time.Duration {
		d := c.inFlightBackoff << min(*k, 16)
		*k++
		return d
	}
	var ae *APIError
	var wait time.Duration
	switch {
	case errors.As(err, &ae) && !ae.retryable():
		return 0, false
	case ae == nil:
		wait = backoff(noAnswer)
	case ae.RetryAfter > 0:
		wait = ae.RetryAfter
	default:
		wait = backoff(inFlight)
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
	req, err := http.NewRequestWithContext(ctx, cl.method, c.base.String()+cl.path, body)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	res, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return res.StatusCode, res.Header, fmt.Errorf("read answer: %w", err)
	}
	if res.StatusCode == cl.want {
		if cl.out != nil {
			if err := json.Unmarshal(raw, cl.out); err != nil {
				return res.StatusCode, res.Header, fmt.Errorf("decode %d answer: %w", res.StatusCode, err)
			}
		}
		return res.StatusCode, res.Header, nil
	}
	return res.StatusCode, res.Header, apiError(res, raw)
}

func apiError(res *http.Response, raw []byte) *APIError {
	e := &APIError{Status: res.StatusCode, RequestID: res.Header.Get("X-Request-Id"),
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

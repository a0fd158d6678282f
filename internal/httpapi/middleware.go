package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/inventory"
)

const requestIDHeader = "X-Request-Id"

// maxRequestID bounds the client's own X-Request-Id, which is echoed in
// the answer and every log line of the request.
const maxRequestID = 128

// requestID tags the request and its logs; a client's own id is kept when
// sane: 1..maxRequestID bytes of printable ASCII, sent once, so that
// nothing a client sends ends up raw in a header or a log. Two ids are
// none: which of them a log line names would be up to every proxy on the
// way.
func (s *server) requestID(c *gin.Context) {
	var id string
	if ids := c.Request.Header.Values(requestIDHeader); len(ids) == 1 {
		id = ids[0]
	}
	// Most clients send none: "" is checked first, since the validation's
	// error for it is a formatted message, built for every such request
	// only to be dropped (3 % of a spread instance's CPU).
	if id == "" || len(id) > maxRequestID || inventory.ValidateIdempotencyKey(id) != nil {
		id = uuid.NewString()
	}
	c.Set(requestIDHeader, id)
	c.Header(requestIDHeader, id)
	c.Next()
}

// closeFramed ends the connection after the answer to every request sent
// with Transfer-Encoding, on every route, those that read no body too. Go's
// server drops a Content-Length sent with it and reads the chunks, but a
// proxy in front may have framed the request by that length: what follows
// on the wire is then not the request the proxy sent next (CL.TE request
// smuggling), and RFC 9112 §6.1 has the server close after such a request.
// The handler cannot tell whether a Content-Length came with it, so every
// chunked request ends its connection: this API's clients send JSON of a
// known length, and chunked requests are rare enough that a new connection
// for each costs nothing that matters.
//
// Every HTTP/1.0 request ends its connection too: Go's server deletes a
// Transfer-Encoding sent with one before the handler sees it and frames
// the body by Content-Length, the reverse of a proxy that honours the
// chunks (TE.CL), and RFC 9112 §6.1 calls such a message faultily framed.
// Only HTTP/1.0 keep-alive clients pay, with a connection per request.
func closeFramed(c *gin.Context) {
	if r := c.Request; r.TransferEncoding != nil || !r.ProtoAtLeast(1, 1) {
		c.Header("Connection", "close")
	}
	c.Next()
}

// recover turns a panic into a logged 500 in the API's error shape.
func (s *server) recover(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.Logger.Error("panic", "request_id", c.GetString(requestIDHeader), "panic", v)
			_ = c.Error(fmt.Errorf("panic: %v", v))
			s.writeError(c)
		}
	}()
	c.Next()
}

// observe logs and counts every request once it is answered.
func (s *server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	d := time.Since(start)
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	status := c.Writer.Status()
	if s.Metrics != nil {
		s.Metrics.HTTP(methodLabel(c.Request.Method), route, status, d)
	}
	level := slog.LevelDebug
	if status >= 500 {
		level = slog.LevelError
		// A request refused over a bound is the bound at work, not a
		// fault, and comes in floods: logged at debug, counted in the
		// metrics, and summed up by one warning now and then (shed).
		if len(c.Errors) > 0 && errors.Is(c.Errors[0].Err, inventory.ErrOverloaded) {
			level = slog.LevelDebug
			s.shed()
		}
	}
	// Checked first: building the line (the errors' text above all) costs
	// more than the rest of the hot path's bookkeeping, for a line that is
	// off by default.
	if ctx := c.Request.Context(); s.Logger.Enabled(ctx, level) {
		s.Logger.Log(ctx, level, "http", "request_id", c.GetString(requestIDHeader), "method", c.Request.Method,
			"path", c.Request.URL.Path, "status", status, "duration", d, "errors", c.Errors.ByType(gin.ErrorTypeAny).String())
	}
}

// shedLogEvery is how often at most the requests refused 503 overloaded
// are summed up in the log.
const shedLogEvery = 10 * time.Second

// shedLog counts the requests refused 503 overloaded between two of its
// warnings.
type shedLog struct {
	every   time.Duration // shedLogEvery; shorter in tests
	refused atomic.Int64
	last    atomic.Int64 // when the last warning was logged, in Unix nanoseconds
	due     atomic.Bool  // a warning is set to go out when every has passed
}

// shed counts one request refused 503 overloaded. The first of a flood is
// said at once; those after it within every are said when every has
// passed, in one line, whether or not more come: a count held back until
// the next refusal, maybe hours later, would put a past flood in a quiet
// hour's line.
func (s *server) shed() {
	l := &s.sheds
	l.refused.Add(1)
	now, last := time.Now().UnixNano(), l.last.Load()
	if now-last >= int64(l.every) && l.last.CompareAndSwap(last, now) {
		s.warnSheds()
		return
	}
	if l.due.CompareAndSwap(false, true) {
		time.AfterFunc(time.Duration(l.last.Load()+int64(l.every)-now), func() {
			l.last.Store(time.Now().UnixNano())
			l.due.Store(false)
			s.warnSheds()
		})
	}
}

// warnSheds logs the refusals counted since the last warning, if any.
func (s *server) warnSheds() {
	if n := s.sheds.refused.Swap(0); n > 0 {
		s.Logger.Warn("overloaded: requests refused 503 overloaded", "refused", n, "logged_at_most_every", s.sheds.every.String())
	}
}

// methods are the label values of the method label: a client may send any
// token as a method, and each new value would be a new series on /metrics.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodOptions: true, http.MethodConnect: true, http.MethodTrace: true,
}

// methodLabel is the method's label value: the method itself when it is one
// of HTTP's, else "other". Routes need no such care: c.FullPath is a route
// pattern or "unmatched".
func methodLabel(m string) string {
	if methods[m] {
		return m
	}
	return "other"
}

// limit answers 503 overloaded, with Retry-After, once max requests run
// through it; max <= 0 is no limit. A request over the limit is refused at
// once rather than queued: a queue in front of a lock wait only adds
// latency, and the client's retry, spread by Retry-After, costs less than
// a pile of goroutines and buffered bodies.
func limit(max int) gin.HandlerFunc {
	if max <= 0 {
		return func(c *gin.Context) { c.Next() }
	}
	slots := make(chan struct{}, max)
	return func(c *gin.Context) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			c.Next()
		default:
			_ = c.Error(errOverloaded)
			c.Abort()
		}
	}
}

// deadline bounds how long a request may run, so that it answers (503
// timeout) before the server's write deadline would cut the connection
// without an answer; d <= 0 is no bound.
func deadline(d time.Duration) gin.HandlerFunc {
	return func(c *gin.Context) {
		if d <= 0 {
			c.Next()
			return
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), d)
		defer cancel()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
	}
}

// renderErrors answers, in the API's error shape, the first error a handler
// recorded with c.Error; handlers only return after recording one.
func (s *server) renderErrors(c *gin.Context) {
	c.Next()
	if len(c.Errors) > 0 && !c.Writer.Written() {
		s.writeError(c)
	}
}

func (s *server) writeError(c *gin.Context) {
	err := c.Errors[0].Err
	status, body := classify(err)
	body.RequestID = c.GetString(requestIDHeader)
	switch {
	case status >= 500 && status != http.StatusServiceUnavailable:
		s.Logger.Error("request failed", "request_id", body.RequestID, "err", err)
	case body.Code == "store_unavailable":
		s.Logger.Warn("database unavailable", "request_id", body.RequestID, "err", err)
	case body.Code == "lock_unavailable":
		s.Logger.Warn("lock unavailable", "request_id", body.RequestID, "err", err)
	case body.Code == "not_ready":
		s.Logger.Warn("not ready", "request_id", body.RequestID, "err", err)
	}
	if status == http.StatusServiceUnavailable {
		c.Header("Retry-After", "1")
	}
	c.AbortWithStatusJSON(status, gin.H{"error": body})
}

// admin guards stock changes when the service has an admin token.
func (s *server) admin(c *gin.Context) {
	if s.AdminToken == "" {
		c.Next()
		return
	}
	// Sent twice, which one counts would be up to every proxy on the way.
	auth := c.Request.Header.Values("Authorization")
	if len(auth) > 1 {
		refuseBody(c, fmt.Errorf("%w: Authorization sent %d times", inventory.ErrInvalid, len(auth)))
		return
	}
	// The scheme is case-insensitive, and one or more spaces end it (RFC
	// 9110 §11.1, §11.4).
	var scheme, token string
	if len(auth) == 1 {
		scheme, token, _ = strings.Cut(auth[0], " ")
	}
	token = strings.TrimLeft(token, " ")
	if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(token), []byte(s.AdminToken)) != 1 {
		c.Header("WWW-Authenticate", `Bearer realm="stockguard"`)
		refuseBody(c, errUnauthorized) // before the body is read or asked for
		return
	}
	c.Next()
}

// fail records err for renderErrors; a client that went away is not our
// error (a request that ran out of its own deadline is: that is a timeout).
// Body errors never come here: readBody answers them itself, since a body
// cut off cancels the request too, and the client may still be there.
func fail(c *gin.Context, err error) {
	if errors.Is(c.Request.Context().Err(), context.Canceled) && !errors.Is(err, errClientGone) {
		err = fmt.Errorf("%w: %w", errClientGone, err)
	}
	_ = c.Error(err)
}

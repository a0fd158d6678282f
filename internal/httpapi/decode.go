package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/inventory"
)

const maxBody = 64 << 10

// decodeStrict decodes a body readBody read into dst and refuses anything a
// lenient decoder would let through: unknown, duplicate or case-folded keys
// (Go's decoder matches "Quantity" to quantity and keeps the last of two
// duplicates), trailing data, invalid UTF-8. Wrong types, floats and
// strings for integers fail in the decoder itself, since dst uses *int64.
func decodeStrict(body []byte, dst any, fields map[string]bool) error {
	if onlySpace(body) {
		return fmt.Errorf("%w: request body is empty, want a JSON object", inventory.ErrInvalid)
	}
	if !utf8.Valid(body) {
		return fmt.Errorf("%w: body is not valid UTF-8", inventory.ErrInvalid)
	}
	if err := checkKeys(body, fields); err != nil {
		return fmt.Errorf("%w: %v", inventory.ErrInvalid, err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return typeError(typ)
		}
		return fmt.Errorf("%w: %s", inventory.ErrInvalid, inventory.Clip(err.Error()))
	}
	if !onlySpace(body[dec.InputOffset():]) {
		return fmt.Errorf("%w: trailing data after the JSON value", inventory.ErrInvalid)
	}
	return nil
}

// typeError says which field got what. The decoder's own text quotes the
// value whole (a number of 60,000 digits comes back in the answer and the
// log) and names our Go types; and an integer too large for its field is
// the right kind, only out of range.
func typeError(typ *json.UnmarshalTypeError) error {
	field := typ.Field
	if field == "" {
		field = "request body"
	}
	if digits, ok := strings.CutPrefix(typ.Value, "number "); ok && isInteger(digits) && jsonKind(typ.Type) == "an integer" {
		return fmt.Errorf("%w: %s: %s is out of range", inventory.ErrInvalid, field, inventory.Clip(digits))
	}
	return fmt.Errorf("%w: %s: got %s, want %s", inventory.ErrInvalid, field, inventory.Clip(typ.Value), jsonKind(typ.Type))
}

// isInteger reports whether s is a JSON number without fraction or exponent.
func isInteger(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// bodyError is what a client is told of a body it did not send whole, or
// that found no room.
func bodyError(err error) error {
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.Is(err, errBodyOverloaded):
		return err
	case errors.As(err, &tooBig):
		return errBodyTooLarge
	case errors.As(err, &ne) && ne.Timeout():
		return errBodyTimeout
	}
	return errBodyUnreadable
}

// bodyKey is the gin key of the body readBody read.
type bodyKey struct{}

// bodyStep is the buffer a body is first read into, kept in a pool: an
// order of a few lines fits (one line is ≈ 50 bytes); beyond, it doubles.
const bodyStep = 512

// maxBuffered bounds the bytes of request bodies buffered at once: a third
// of gctune.MemoryLimit (100 MiB), so that bodies alone never bring the
// live heap near it, the rest left to the requests they become.
const maxBuffered = 32 << 20

// Buffers over smallBody may hold only maxLarge of maxBuffered between
// them, the rest kept for the bodies of smallBody or less that most orders
// are: else 512 connections, each holding 64 KiB for the 32 KiB of a body
// it sent (16 MiB in all), deny every order until the read timeout ends
// them. Denying an order of a few bytes, which needs bodyStep left, now
// takes bodies of smallBody or less holding more than
// maxBuffered-maxLarge-bodyStep: 4,096 connections holding 4 KiB each
// (2 KiB sent), besides 256 holding 64 KiB (32 KiB sent) to fill
// maxLarge, so 4,352 connections sending 16 MiB; more connections can
// send less, one byte holding bodyStep. (The body slots the budget
// replaced took 2,048 connections sending headers only.) Orders are 0.1
// to 5 KB (≈ 50 bytes a line), so 4 KiB takes in most of them; the
// largest valid one (100 lines of 64-byte SKUs, ≈ 9.4 KB) needs 16 KiB at most,
// and maxLarge holds 1,024 of those, the default --max-in-flight. A
// larger smallBody makes a denial cheaper: 8 KiB takes 2,048 connections.
const (
	smallBody = 4 << 10
	maxLarge  = maxBuffered / 2
)

// bodyBuf is what readBody reads a body into: first, the first step, which
// goes back to the pool with it; body, the bytes read, for the handlers.
type bodyBuf struct{ first, body []byte }

// readBody reads a request's body before the request takes an in-flight
// slot (limit): a client that trickles its body, or never ends it, holds
// its connection for the server's read timeout at most, but none of the
// slots every order needs. A body that cannot be read whole is answered at
// once, on every route, and the connection is not reused: what follows a
// broken body on the wire (a malformed chunk or trailer) must never be
// parsed as the next request.
//
// The bytes of the bodies buffered at once are bounded by maxBuffered
// (those of buffers over smallBody by maxLarge), and a body takes its
// share as its bytes arrive (see readAll), never on its declared length: a
// client that sends headers only holds none of it. What a body took is
// given back when its answer is ready (answerLater sends it after, and the
// body is let go with it), or when readAll fails or panics. A body whose
// next step does not fit is refused 503 overloaded, unread if fewer than
// bodyStep bytes are left when it comes. No count of bodies bounds them
// besides: the bytes are what costs memory, and a count of bodies being
// read is one that clients sending headers alone can fill, denying every
// body to the rest while costing the instance nothing but their
// connections.
//
// The server's request body is never replaced: net/http decides from its
// own body type whether the connection can serve another request
// (golang.org/issue/12027), so the bytes read are kept under bodyKey.
func readBody() gin.HandlerFunc {
	budget := &bodyBudget{max: maxBuffered, maxLarge: maxLarge}
	pool := sync.Pool{New: func() any { return &bodyBuf{first: make([]byte, 0, bodyStep)} }}
	return func(c *gin.Context) {
		r := c.Request
		if r.Body == nil || r.Body == http.NoBody {
			c.Next()
			return
		}
		// Refused on its declared length: reading, or asking a client that
		// sent Expect: 100-continue for, a body that will be refused anyway
		// only wastes its time and ours.
		if r.ContentLength > maxBody {
			refuseBody(c, errBodyTooLarge)
			return
		}
		if budget.spent() {
			refuseBody(c, errBodyOverloaded)
			return
		}
		buf := pool.Get().(*bodyBuf)
		var held int64 // kept up to date by readAll, so a panic in it gives back what it took
		defer func() {
			budget.give(held)
			c.Delete(bodyKey{}) // the buffer goes to another request
			buf.body = nil
			pool.Put(buf)
		}()
		var err error
		buf.body, err = readAll(c.Writer, r, buf.first[:0], budget, &held)
		if err != nil {
			refuseBody(c, bodyError(err))
			return
		}
		c.Set(bodyKey{}, buf)
		c.Next()
	}
}

// readAll reads r's body whole, at most maxBody bytes, into buf (empty, of
// bodyStep bytes) and, as they come, into buffers of twice the size, never
// larger than a declared length. *held is what it holds of budget, the
// size of its buffer, set as soon as budget grants it: the first step once
// the first bytes are in (bodyStep, however short the body), each next one
// as soon as the buffer is full, before more bytes come: a client that
// stops sending holds at most twice what it sent, or bodyStep. A body
// whose next step does not fit fails errBodyOverloaded.
func readAll(w http.ResponseWriter, r *http.Request, buf []byte, budget *bodyBudget, held *int64) (body []byte, err error) {
	src, limit := r.Body, r.ContentLength // net/http's body ends at the declared length: no more can come
	if limit < 0 {
		// The server's own writer, not gin's: only through it does a body
		// past the limit make net/http linger on close instead of
		// resetting the connection, which could lose the 413 on the way.
		src = http.MaxBytesReader(serverWriter(w), r.Body, maxBody)
		limit = maxBody + 1 // room for the byte that tells a body over the limit
	}
	body = buf
	for int64(len(body)) < limit {
		if len(body) == cap(body) {
			grown := min(2*int64(cap(body)), limit)
			if !budget.grow(*held, grown) {
				return body, errBodyOverloaded
			}
			*held = grown
			body = append(make([]byte, 0, grown), body...)
		}
		n, err := src.Read(body[len(body):min(int64(cap(body)), limit)])
		body = body[:len(body)+n]
		if n > 0 && *held < int64(cap(body)) {
			if !budget.grow(*held, int64(cap(body))) {
				return body, errBodyOverloaded
			}
			*held = int64(cap(body))
		}
		switch {
		case err == io.EOF && r.ContentLength >= 0 && int64(len(body)) < limit:
			return body, io.ErrUnexpectedEOF
		case err == io.EOF:
			return body, nil
		case err != nil:
			return body, err
		}
	}
	return body, nil
}

// bodyBudget is the bytes of request bodies buffered at once, and those of
// them in buffers over smallBody, with their bounds. A mutex, not two
// atomics: a step that moves a body into the large tier changes both
// counts, and must be refused or granted as one.
type bodyBudget struct {
	max, maxLarge int64

	mu          sync.Mutex
	used, large int64
}

// largePart is what a buffer of n bytes counts toward the large tier: all
// of it once it is over smallBody.
func largePart(n int64) int64 {
	if n > smallBody {
		return n
	}
	return 0
}

// grow takes a body's share from held bytes to n, or leaves it and reports
// false when either bound would be passed.
func (b *bodyBudget) grow(held, n int64) bool {
	large := largePart(n) - largePart(held)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n-held > b.max || b.large+large > b.maxLarge {
		return false
	}
	b.used += n - held
	b.large += large
	return true
}

// give gives back a body's share of held bytes.
func (b *bodyBudget) give(held int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= held
	b.large -= largePart(held)
}

// spent reports whether a body's first step no longer fits.
func (b *bodyBudget) spent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used+bodyStep > b.max
}

// serverWriter is the http.ResponseWriter under w's wrappers (gin's), at
// most a few deep.
func serverWriter(w http.ResponseWriter) http.ResponseWriter {
	for range 8 {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	return w
}

// refuseBody answers err to a request whose body is unread or was cut off,
// and closes the connection after the answer: what is left of the body on
// the wire must not be read as the next request, nor waited for before the
// answer goes out (net/http reads up to 256 KiB of an unread body first
// on a connection it keeps). After the answer net/http still reads and
// drops what of the body comes, up to 256 KiB within the read timeout,
// before it closes, and that stays: a close over body bytes still arriving
// resets the connection, which can take the answer with it (RFC 9112
// §9.6; cutting the read 0.5 s after the answer lost answers to slow
// uploads), while a body that never comes costs its connection no more
// than a slow body does, the read timeout.
func refuseBody(c *gin.Context, err error) {
	if b := c.Request.Body; b != nil && b != http.NoBody {
		c.Header("Connection", "close")
	}
	_ = c.Error(err)
	c.Abort()
}

// noBody runs before the handler of every route that reads no body (the
// probes, /metrics, unknown paths and methods), so that a body declared or sent to
// them is not waited for: over 64 KiB by its Content-Length it is refused
// 413, as on every route; any other is left unread, and the connection
// ends after the answer (net/http would otherwise read up to 256 KiB of it
// before answering, until the read timeout for one that never comes).
func noBody(c *gin.Context) {
	r := c.Request
	if r.ContentLength > maxBody {
		refuseBody(c, errBodyTooLarge)
		return
	}
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		c.Header("Connection", "close")
	}
	c.Next()
}

// requestBody is the body readBody read, nil when the request had none.
func requestBody(c *gin.Context) []byte {
	if v, ok := c.Get(bodyKey{}); ok {
		return v.(*bodyBuf).body
	}
	return nil
}

// jsonBody refuses, before the body is read (and before a client that sent
// Expect: 100-continue is asked for it), a body the decoder would refuse
// for its media type or could not read for its coding.
func jsonBody(c *gin.Context) {
	// Sent twice, which one counts would be up to every proxy on the way.
	types := c.Request.Header.Values("Content-Type")
	if len(types) > 1 {
		refuseBody(c, fmt.Errorf("%w: Content-Type sent %d times", inventory.ErrInvalid, len(types)))
		return
	}
	var ct string
	if len(types) == 1 {
		ct = types[0]
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		refuseBody(c, errMediaType)
		return
	}
	for _, ce := range c.Request.Header.Values("Content-Encoding") {
		if !strings.EqualFold(strings.TrimSpace(ce), "identity") {
			refuseBody(c, errContentEncoding)
			return
		}
	}
	c.Next()
}

// checkKeys fails on a key that appears twice in one object or is not
// exactly one of fields, at any depth. It is one pass over the bytes, not
// the decoder's token stream, which cost as much as the decoding itself on
// every order. It checks keys only: the decoder that runs next judges the
// syntax, so a malformed document may pass here, never a well-formed one
// with a bad key.
func checkKeys(body []byte, fields map[string]bool) error {
	type frame struct {
		object, wantKey bool
		// start is where this object's keys begin in seen: a nested
		// object's keys go after its parent's and are dropped when it
		// closes, so an object's keys are always seen[start:].
		start int
	}
	// Both start on the stack, not the heap (an order's three levels and
	// few keys fit): this walk runs for every order.
	stack := make([]frame, 0, maxDepth)
	// seen is bounded by len(fields) per open object: a key that is not a
	// field, or is one already seen, ends the walk.
	seen := make([][]byte, 0, 16)
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '{', '[':
			if len(stack) == maxDepth {
				return fmt.Errorf("nested deeper than %d", maxDepth)
			}
			stack = append(stack, frame{object: body[i] == '{', wantKey: body[i] == '{', start: len(seen)})
		case '}', ']':
			if len(stack) == 0 {
				return errors.New("unbalanced brackets")
			}
			seen = seen[:stack[len(stack)-1].start]
			stack = stack[:len(stack)-1]
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].wantKey = true
			}
		case '"':
			end, escaped := stringEnd(body, i)
			if end < 0 {
				return errors.New("unterminated string")
			}
			if n := len(stack); n > 0 && stack[n-1].wantKey {
				top := &stack[n-1]
				top.wantKey = false
				key := body[i+1 : end]
				if escaped {
					var k string
					if err := json.Unmarshal(body[i:end+1], &k); err != nil {
						return err
					}
					key = []byte(k)
				}
				if !fields[string(key)] {
					return fmt.Errorf("unknown field %q", inventory.Clip(string(key)))
				}
				for _, k := range seen[top.start:] {
					if bytes.Equal(k, key) {
						return fmt.Errorf("duplicate field %q", key)
					}
				}
				seen = append(seen, key)
			}
			i = end
		}
	}
	return nil
}

// maxDepth bounds the nesting of a body: an order is three deep, and a
// 64 KB body of brackets must not cost a frame each.
const maxDepth = 32

// stringEnd returns the index of the quote that closes the string opening
// at body[start], or -1, and whether the string has escapes.
func stringEnd(body []byte, start int) (end int, escaped bool) {
	for i := start + 1; i < len(body); i++ {
		switch body[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			return i, escaped
		}
	}
	return -1, escaped
}

// onlySpace reports whether b is JSON whitespace alone.
func onlySpace(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// jsonKind names the JSON kind a Go type decodes from, for errors.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return "an object"
	}
}

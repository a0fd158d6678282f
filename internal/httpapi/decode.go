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
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/inventory"
)

const maxBody = 64 << 10

// decodeStrict reads a JSON body into dst and refuses anything a lenient
// decoder would let through: unknown, duplicate or case-folded keys (Go's
// decoder matches "Quantity" to quantity and keeps the last of two
// duplicates), trailing data, invalid UTF-8. Wrong types, floats and
// strings for integers fail in the decoder itself, since dst uses *int64.
func decodeStrict(r *http.Request, w http.ResponseWriter, dst any, fields map[string]bool) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return errMediaType
	}
	var body []byte
	if rb, ok := r.Body.(*readAlready); ok {
		// Read by readBody (every /v1 route): no second copy, and its
		// error is already the client's.
		if rb.err != nil {
			return rb.err
		}
		body = rb.body
	} else if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		return bodyError(err)
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
			// The decoder's own text quotes the value whole (a number of
			// 60,000 digits comes back in the answer and the log) and names
			// our Go types: say the field and the kind wanted instead.
			return fmt.Errorf("%w: %s: got %s, want %s", inventory.ErrInvalid, inventory.Clip(typ.Field),
				inventory.Clip(typ.Value), jsonKind(typ.Type))
		}
		return fmt.Errorf("%w: %s", inventory.ErrInvalid, inventory.Clip(err.Error()))
	}
	if !onlySpace(body[dec.InputOffset():]) {
		return fmt.Errorf("%w: trailing data after the JSON value", inventory.ErrInvalid)
	}
	return nil
}

// bodyError is what a client is told of a body it did not send whole.
func bodyError(err error) error {
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooBig):
		return errBodyTooLarge
	case errors.As(err, &ne) && ne.Timeout():
		return errBodyTimeout
	}
	return errBodyUnreadable
}

// readBody reads a request's body before the request takes an in-flight
// slot (limit): a client that trickles its body, or never ends it, holds
// its connection for the server's read timeout at most, but none of the
// slots every order needs. Read whole, the request goes on; its handler
// decodes what was read, or gets the error that ended the read (413 for a
// body past 64 KiB, 400 for one cut off), after its own checks.
func readBody(c *gin.Context) {
	r := c.Request
	if r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(http.MaxBytesReader(c.Writer, r.Body, maxBody))
		if err != nil {
			err = bodyError(err)
		}
		rb := &readAlready{body: body, err: err}
		rb.Reset(body)
		r.Body = rb
	}
	c.Next()
}

// readAlready is a body readBody read: its bytes, then the error that ended
// the read, if any.
type readAlready struct {
	bytes.Reader
	body []byte
	err  error
}

func (b *readAlready) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF && b.err != nil {
		return n, b.err
	}
	return n, err
}

func (*readAlready) Close() error { return nil }

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
	var stack []frame
	// seen is bounded by len(fields) per open object: a key that is not a
	// field, or is one already seen, ends the walk.
	var seen [][]byte
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

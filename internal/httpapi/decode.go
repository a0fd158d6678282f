package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"unicode/utf8"

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
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errBodyTooLarge
		}
		return fmt.Errorf("%w: reading body: %v", inventory.ErrInvalid, err)
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
		return fmt.Errorf("%w: %v", inventory.ErrInvalid, err)
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON value", inventory.ErrInvalid)
	}
	return nil
}

// checkKeys walks every object in the document and fails on a key that
// appears twice in one object or is not exactly one of fields.
func checkKeys(body []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expect {
			key, _ := tok.(string) // inside an object, Token yields keys as strings or the closing '}'
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				markValueDone(stack)
				continue
			}
			if !fields[key] {
				return fmt.Errorf("unknown field %q", key)
			}
			if top.keys[key] {
				return fmt.Errorf("duplicate field %q", key)
			}
			top.keys[key] = true
			top.expect = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, expect: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			markValueDone(stack)
		default:
			markValueDone(stack)
		}
	}
}

// markValueDone notes that the enclosing object's current value is complete,
// so its next string token is a key.
func markValueDone(stack []*frame) {
	if len(stack) > 0 && stack[len(stack)-1].object {
		stack[len(stack)-1].expect = true
	}
}

type frame struct {
	object bool
	keys   map[string]bool
	expect bool // the next token in an object is a key
}

package pgproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxMessage bounds the length of one protocol message the proxy accepts
// (Postgres itself refuses most messages over 1 GiB).
const maxMessage = 1 << 30

// maxParsed bounds the payload the proxy reads into memory to inspect;
// longer messages of the inspected kinds are forwarded uninspected.
const maxParsed = 1 << 20

// txnIdle is ReadyForQuery's transaction status outside a transaction
// block ('T' is inside one, 'E' inside a failed one).
const txnIdle = 'I'

// Request codes of the untyped start-up messages.
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
	cancelRequestCode = 80877102
)

var errMessageTooLong = errors.New("pgproxy: protocol message too long")

// header is a typed message's type byte and payload length.
type header struct {
	typ byte
	n   int // payload bytes after the length field
}

func readHeader(r *bufio.Reader) (header, error) {
	var b [5]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return header{}, err
	}
	l := int(binary.BigEndian.Uint32(b[1:]))
	if l < 4 || l > maxMessage {
		return header{}, fmt.Errorf("%w: type %q length %d", errMessageTooLong, b[0], l)
	}
	return header{typ: b[0], n: l - 4}, nil
}

func (h header) bytes() []byte {
	var b [5]byte
	b[0] = h.typ
	binary.BigEndian.PutUint32(b[1:], uint32(h.n+4))
	return b[:]
}

// readStartup reads one untyped start-up message (length, then payload) and
// returns it whole, with its request code.
func readStartup(r *bufio.Reader) ([]byte, uint32, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return nil, 0, err
	}
	l := int(binary.BigEndian.Uint32(b[:4]))
	if l < 8 || l > maxParsed {
		return nil, 0, fmt.Errorf("%w: start-up length %d", errMessageTooLong, l)
	}
	msg := make([]byte, l)
	copy(msg, b[:])
	if _, err := io.ReadFull(r, msg[8:]); err != nil {
		return nil, 0, err
	}
	return msg, binary.BigEndian.Uint32(b[4:]), nil
}

// cstrings splits the leading NUL-terminated strings off payload.
func cstrings(payload []byte, n int) ([]string, bool) {
	out := make([]string, 0, n)
	for range n {
		i := bytes.IndexByte(payload, 0)
		if i < 0 {
			return nil, false
		}
		out = append(out, string(payload[:i]))
		payload = payload[i+1:]
	}
	return out, true
}

// normalize lowercases a statement and folds its blanks and trailing
// semicolons, so "COMMIT;", " commit " and "Commit\n" compare equal.
func normalize(sql string) string {
	sql = strings.TrimRight(strings.TrimSpace(sql), "; \t\r\n")
	return strings.ToLower(strings.Join(strings.Fields(sql), " "))
}

// commitStatements are the statements that commit a transaction (COMMIT
// PREPARED, which finishes a two-phase commit, is not among them): each
// ends an explicit transaction, and none is a statement of its own to drop.
var commitStatements = map[string]bool{
	"commit": true, "commit work": true, "commit transaction": true,
	"commit and no chain": true,
	"end":                 true, "end work": true, "end transaction": true,
}

// endsOrStartsTxn reports whether sql begins or ends a transaction: not a
// statement of its own to drop. Whether a transaction is open is the
// server's to say (ReadyForQuery), not this text's.
func endsOrStartsTxn(sql string) bool {
	s := normalize(sql)
	switch {
	case commitStatements[s], s == "begin", s == "abort",
		strings.HasPrefix(s, "begin "), strings.HasPrefix(s, "start transaction"):
		return true
	case s == "rollback", s == "rollback work", s == "rollback transaction":
		return true
	}
	return false
}

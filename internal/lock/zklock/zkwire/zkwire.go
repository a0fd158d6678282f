// Package zkwire speaks the pieces of ZooKeeper's client protocol that
// go-zookeeper does not expose: the frames of a connection, followed as
// they are written and read (which request a reply answers, by its xid),
// the connect response, read off a connection as it arrives (the
// negotiated timeout and the session password, which go-zookeeper keeps to
// itself), and ending a session from outside, which the tests and the
// chaos suite use to expire a session the way a partition longer than its
// timeout would.
package zkwire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ConnectResponse is what a server answers to a connect request.
type ConnectResponse struct {
	Timeout   time.Duration
	SessionID int64
	Passwd    []byte
}

// ParseConnectResponse decodes a connect response body (without its length
// prefix): int32 protocol version, int32 timeout in ms, int64 session id,
// int32 password length, password bytes, then an optional read-only flag.
// A server refusing a session answers timeout 0 and session 0.
func ParseConnectResponse(b []byte) (ConnectResponse, error) {
	if len(b) < 20 {
		return ConnectResponse{}, errors.New("zookeeper: short connect response")
	}
	timeout := int32(binary.BigEndian.Uint32(b[4:8]))
	id := int64(binary.BigEndian.Uint64(b[8:16]))
	n := int32(binary.BigEndian.Uint32(b[16:20]))
	if n < 0 || int(n) > len(b)-20 {
		return ConnectResponse{}, errors.New("zookeeper: bad password length in connect response")
	}
	return ConnectResponse{
		Timeout:   time.Duration(timeout) * time.Millisecond,
		SessionID: id,
		Passwd:    append([]byte(nil), b[20:20+n]...),
	}, nil
}

// maxHandshake bounds the connect response we buffer; the real one is about
// 40 bytes (a 16-byte password).
const maxHandshake = 1024

// headerSize is the longest header kept of a frame after the first: a
// reply's (int32 xid, int64 zxid, int32 error code); a request's is its
// first 8 bytes (int32 xid, int32 opcode).
const headerSize = 16

// Frames finds the frames in one direction of a client connection (each a
// 4-byte big-endian length, then that many bytes of body), however the
// stream is cut into reads or writes, and keeps the start of each: all of
// the first frame's body (the connect request or response), up to
// maxHandshake bytes; the header of every later one (a request's xid and
// opcode, a reply's xid, zxid and error code), up to headerSize bytes.
// The zero value is ready to use; it is not safe for concurrent use (one
// direction of a connection is read, or written, by one goroutine at a
// time).
type Frames struct {
	n    int    // frames whose start was complete
	head []byte // the current frame's length and body start, as they come
	skip int    // bytes of the current frame's body after its start
}

// Frame is the start of one frame.
type Frame struct {
	Index int    // 0 for the connection's first frame, the connect request or response
	Size  int    // the body's length
	Start []byte // the body's start (see Frames); valid until the next call of Next
}

// Xid returns the xid a frame after the first starts with: a request's,
// the one its reply echoes, -1 for a watch notification, -2 for a ping.
func (f Frame) Xid() (int32, bool) {
	if f.Index == 0 || len(f.Start) < 4 {
		return 0, false
	}
	return int32(binary.BigEndian.Uint32(f.Start)), true
}

// Op returns the opcode of a request (a frame the client wrote, after the
// first).
func (f Frame) Op() (int32, bool) {
	if f.Index == 0 || len(f.Start) < 8 {
		return 0, false
	}
	return int32(binary.BigEndian.Uint32(f.Start[4:])), true
}

// Err returns the error code of a reply (a frame the client read, after
// the first): 0 for success.
func (f Frame) Err() (int32, bool) {
	if f.Index == 0 || len(f.Start) < 16 {
		return 0, false
	}
	return int32(binary.BigEndian.Uint32(f.Start[12:])), true
}

// Next consumes p up to the end of the next frame's start and returns the
// rest of p; ok reports that a frame's start is complete, in fr. Callers
// loop while rest is not empty. It allocates only for the first frame.
func (f *Frames) Next(p []byte) (rest []byte, fr Frame, ok bool) {
	if f.skip > 0 {
		k := min(f.skip, len(p))
		f.skip -= k
		p = p[k:]
	}
	if len(f.head) < 4 {
		k := min(4-len(f.head), len(p))
		f.head = append(f.head, p[:k]...)
		p = p[k:]
		if len(f.head) < 4 {
			return p, Frame{}, false
		}
	}
	size := int(binary.BigEndian.Uint32(f.head))
	want := min(size, headerSize)
	if f.n == 0 {
		want = min(size, maxHandshake)
	}
	k := min(4+want-len(f.head), len(p))
	f.head = append(f.head, p[:k]...)
	p = p[k:]
	if len(f.head) < 4+want {
		return p, Frame{}, false
	}
	fr = Frame{Index: f.n, Size: size, Start: f.head[4:]}
	f.n++
	f.skip = size - want
	f.head = f.head[:0]
	return p, fr, true
}

// ErrUnknownSession means the server would not hand the session over
// before anything was closed: it does not know the id, or the password is
// wrong. The session, if it exists, lives on; its owner may have to
// reconnect, as the server drops the owner's connection before it checks
// the password.
var ErrUnknownSession = errors.New("zookeeper: session not taken over")

const (
	opCloseSession = -11
	// askTimeout is the session timeout a takeover asks for; irrelevant,
	// the session is closed at once.
	askTimeout = 4000 // ms
	// maxRounds bounds the takeovers one ExpireSession makes: a close and
	// the takeover that confirms it, plus a few for a server that drops the
	// connection before answering (one that is not serving yet, say).
	maxRounds = 6
	// maxFrame bounds what is read here; the answers are tens of bytes.
	maxFrame = 1 << 16
)

// ExpireSession ends session id on the ensemble through the server at
// addr: a second client presents the session's id and password, which
// moves the session to it (the server drops the owner's connection), then
// closes it. The ensemble deletes the session's ephemeral nodes at once;
// the owner learns, on reconnecting, that its session expired.
//
// A server may drop the connection instead of answering the close, so a
// close is confirmed by one more takeover, which the server must refuse:
// ExpireSession returns nil only once the ensemble no longer knows the
// session.
func ExpireSession(ctx context.Context, addr string, id int64, passwd []byte) error {
	closed := false // a close was sent in some round
	var last error
	for round := range maxRounds {
		if round > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("expire zk session %#x: %w (last: %v)", id, ctx.Err(), last)
			case <-time.After(time.Duration(round) * 50 * time.Millisecond):
			}
		}
		gone, sent, err := closeOnce(ctx, addr, id, passwd)
		closed = closed || sent
		switch {
		case err != nil:
			last = err
		case gone && closed:
			return nil
		case gone:
			return fmt.Errorf("expire zk session %#x at %s: %w", id, addr, ErrUnknownSession)
		}
	}
	if last == nil {
		last = errors.New("the server still hands the session over after a close")
	}
	return fmt.Errorf("expire zk session %#x at %s: %d rounds: %w", id, addr, maxRounds, last)
}

// closeOnce takes the session over and closes it. gone reports that the
// server refused the takeover: it no longer knows the session; sent, that
// a close was written, whole or not (it may have taken even if err says
// its answer did not come; if it did not, the next takeover succeeds).
func closeOnce(ctx context.Context, addr string, id int64, passwd []byte) (gone, sent bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, false, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var req bytes.Buffer
	// protocol version, last zxid seen, timeout, session id, password
	for _, v := range []any{int32(0), int64(0), int32(askTimeout), id, int32(len(passwd))} {
		_ = binary.Write(&req, binary.BigEndian, v)
	}
	req.Write(passwd)
	if err := writeFrame(conn, req.Bytes()); err != nil {
		return false, false, fmt.Errorf("connect: %w", err)
	}
	body, err := readFrame(conn)
	if err != nil {
		return false, false, fmt.Errorf("connect answer: %w", err)
	}
	resp, err := ParseConnectResponse(body)
	if err != nil {
		return false, false, err
	}
	if resp.SessionID != id || resp.Timeout <= 0 {
		return true, false, nil
	}
	var closeReq bytes.Buffer
	_ = binary.Write(&closeReq, binary.BigEndian, []int32{1, opCloseSession}) // xid, op
	if err := writeFrame(conn, closeReq.Bytes()); err != nil {
		return false, true, fmt.Errorf("close: %w", err)
	}
	// The answer, or EOF from a server that closes the connection first;
	// either way the next round's takeover says whether the close took.
	if _, err := readFrame(conn); err != nil && !errors.Is(err, io.EOF) {
		return false, true, fmt.Errorf("close answer: %w", err)
	}
	return false, true, nil
}

func writeFrame(w io.Writer, body []byte) error {
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	_, err := w.Write(append(frame, body...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxFrame {
		return nil, fmt.Errorf("zookeeper frame of %d bytes", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return body, nil
}

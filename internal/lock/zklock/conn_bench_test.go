package zklock

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// echoConn answers every request frame written to it with a reply frame of
// the same xid (a 16-byte reply header and 8 bytes of body), in memory, so
// that BenchmarkTrackedConnFrame measures only what trackedConn adds per
// frame.
type echoConn struct {
	net.Conn
	buf  [256]byte
	r, w int
}

func (c *echoConn) queue(p []byte) {
	if c.r == c.w {
		c.r, c.w = 0, 0
	}
	c.w += copy(c.buf[c.w:], p)
}

func (c *echoConn) Write(p []byte) (int, error) {
	var frame [4 + 24]byte
	binary.BigEndian.PutUint32(frame[0:], 24)
	copy(frame[4:8], p[4:8]) // xid
	binary.BigEndian.PutUint64(frame[8:], 1)
	c.queue(frame[:])
	return len(p), nil
}

func (c *echoConn) Read(p []byte) (int, error) {
	n := copy(p, c.buf[c.r:c.w])
	c.r += n
	return n, nil
}

func (c *echoConn) SetReadDeadline(time.Time) error  { return nil }
func (c *echoConn) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkTrackedConnFrame is one request and its reply through a
// trackedConn, called as go-zookeeper calls it (deadline, write, deadline;
// deadline, read of the length, read of the body, deadline), its handshake
// done: the per-frame cost the tracking adds to every request.
func BenchmarkTrackedConnFrame(b *testing.B) {
	s := &session{born: time.Now()}
	c := benchTrackedConn(s, &echoConn{})
	// The handshake: a connect request and its answer.
	hs := make([]byte, 4+40)
	binary.BigEndian.PutUint32(hs, 40)
	ec := c.Conn.(*echoConn)
	if _, err := c.Write(hs); err != nil {
		b.Fatal(err)
	}
	ec.r, ec.w = 0, 0
	resp := make([]byte, 4+36)
	binary.BigEndian.PutUint32(resp, 36)
	binary.BigEndian.PutUint32(resp[8:], 4000)
	binary.BigEndian.PutUint64(resp[12:], 1)
	binary.BigEndian.PutUint32(resp[20:], 16)
	ec.queue(resp)
	if _, err := io.ReadFull(c, make([]byte, len(resp))); err != nil {
		b.Fatal(err)
	}
	req := make([]byte, 4+8+16)
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	buf := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		binary.BigEndian.PutUint32(req[4:], uint32(i&0x7fffffff))
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		_ = c.SetWriteDeadline(time.Time{})
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := io.ReadFull(c, buf[:4]); err != nil {
			b.Fatal(err)
		}
		n := int(binary.BigEndian.Uint32(buf[:4]))
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			b.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Time{})
	}
}

func benchTrackedConn(s *session, c net.Conn) *trackedConn {
	return &trackedConn{Conn: c, s: s}
}

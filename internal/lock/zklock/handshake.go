package zklock

import (
	"encoding/binary"
	"net"

	"github.com/stockguard/stockguard/internal/lock/zklock/zkwire"
)

// maxHandshake bounds the connect response we buffer; the real one is about
// 40 bytes (a 16-byte password).
const maxHandshake = 1024

// handshakeReader collects the first frame a server sends on a new TCP
// connection, which is always the connect response.
type handshakeReader struct {
	buf  []byte
	done bool
}

// feed adds bytes read from the connection; it returns the parsed response
// once, when the frame is complete.
func (h *handshakeReader) feed(p []byte) (zkwire.ConnectResponse, bool) {
	if h.done {
		return zkwire.ConnectResponse{}, false
	}
	h.buf = append(h.buf, p...)
	if len(h.buf) < 4 {
		return zkwire.ConnectResponse{}, false
	}
	size := int(binary.BigEndian.Uint32(h.buf))
	if size > maxHandshake {
		h.done, h.buf = true, nil
		return zkwire.ConnectResponse{}, false
	}
	if len(h.buf) < 4+size {
		return zkwire.ConnectResponse{}, false
	}
	info, err := zkwire.ParseConnectResponse(h.buf[4 : 4+size])
	h.done, h.buf = true, nil
	return info, err == nil
}

// trackedConn tells its session when the server was last heard from and
// what the handshake negotiated. go-zookeeper reads one connection from one
// goroutine at a time (the handshake, then the receive loop), so the reader
// state needs no lock.
type trackedConn struct {
	net.Conn
	s  *session
	hs handshakeReader
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.s.heard()
		if info, ok := c.hs.feed(p[:n]); ok {
			c.s.handshook(info)
		}
	}
	return n, err
}

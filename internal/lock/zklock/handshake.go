package zklock

import (
	"net"

	"github.com/stockguard/stockguard/internal/lock/zklock/zkwire"
)

// trackedConn tells its session when the server was last heard from and
// what the handshake negotiated. go-zookeeper reads one connection from one
// goroutine at a time (the handshake, then the receive loop), so the reader
// state needs no lock.
type trackedConn struct {
	net.Conn
	s  *session
	hs zkwire.HandshakeReader
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.s.heard()
		if info, ok := c.hs.Feed(p[:n]); ok {
			c.s.handshook(info)
		}
	}
	return n, err
}

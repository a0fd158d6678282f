package zklock

import (
	"encoding/binary"
	"errors"
	"net"
	"time"
)

// connectInfo is what the server answers to a connect request: the
// negotiated timeout, the session id and the session password. go-zookeeper
// keeps the timeout and the password to itself; the Locker needs the
// timeout to know when a disconnected session may have expired.
type connectInfo struct {
	Timeout   time.Duration
	SessionID int64
	Passwd    []byte
}

// maxHandshake bounds the connect response we buffer; the real one is about
// 40 bytes (a 16-byte password).
const maxHandshake = 1024

// parseConnectResponse decodes a connect response body (without its length
// prefix): int32 protocol version, int32 timeout in ms, int64 session id,
// int32 password length, password bytes, then an optional read-only flag.
func parseConnectResponse(b []byte) (connectInfo, error) {
	if len(b) < 20 {
		return connectInfo{}, errors.New("zookeeper: short connect response")
	}
	timeout := int32(binary.BigEndian.Uint32(b[4:8]))
	id := int64(binary.BigEndian.Uint64(b[8:16]))
	n := int32(binary.BigEndian.Uint32(b[16:20]))
	if n < 0 || int(n) > len(b)-20 {
		return connectInfo{}, errors.New("zookeeper: bad password length in connect response")
	}
	return connectInfo{
		Timeout:   time.Duration(timeout) * time.Millisecond,
		SessionID: id,
		Passwd:    append([]byte(nil), b[20:20+n]...),
	}, nil
}

// handshakeReader collects the first frame a server sends on a new TCP
// connection, which is always the connect response.
type handshakeReader struct {
	buf  []byte
	done bool
}

// feed adds bytes read from the connection; it returns the parsed response
// once, when the frame is complete.
func (h *handshakeReader) feed(p []byte) (connectInfo, bool) {
	if h.done {
		return connectInfo{}, false
	}
	h.buf = append(h.buf, p...)
	if len(h.buf) < 4 {
		return connectInfo{}, false
	}
	size := int(binary.BigEndian.Uint32(h.buf))
	if size > maxHandshake {
		h.done, h.buf = true, nil
		return connectInfo{}, false
	}
	if len(h.buf) < 4+size {
		return connectInfo{}, false
	}
	info, err := parseConnectResponse(h.buf[4 : 4+size])
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

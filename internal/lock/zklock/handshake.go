package zklock

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockguard/stockguard/internal/lock/zklock/zkwire"
)

// trackedConn is one connection of a session to a server, as go-zookeeper
// uses it, watched on the session's behalf:
//
//   - Every read tells the session when the server was last heard from
//     (heard), and the first frame, the connect response, what the
//     handshake negotiated (handshook).
//   - Every request written is kept, with the time its write began and
//     whether its reply must pass through the leader, until its reply
//     comes. Any reply tells the session that its server heard from it no
//     earlier than that (answered). Only a successful reply to a write or a
//     sync tells it the leader, which expires sessions, was still in touch
//     (confirmed): a follower cut off from the quorum answers pings and
//     reads on its own for syncLimit × tickTime, while the leader, hearing
//     nothing of the session, expires it.
//   - Until the connect response is in, no deadline is later than the
//     handshake's budget (handshakeBudget), so a server that accepts and
//     never answers is left for the next one within a share of the timeout.
//   - A failed read closes the socket: go-zookeeper drops the connection
//     after any read error, but reports it only once its send loop ends
//     too, and that loop may be blocked in a write, on a full send buffer,
//     until the write's own deadline.
//
// go-zookeeper reads a connection from one goroutine at a time (the
// handshake, then the receive loop) and writes it from one goroutine at a
// time (the handshake, then the send loop), so in and out need no lock;
// sent is shared by the two.
type trackedConn struct {
	net.Conn
	s *session

	hsBy   time.Time   // the end of the handshake's budget
	hsDone atomic.Bool // the connect response is in: deadlines are go-zookeeper's own

	in, out zkwire.Frames

	mu          sync.Mutex
	connectSent int64     // since born: when the connect request's write began
	sent        []sentReq // requests written, oldest first; those before head are done with
	head        int
}

// sentReq is one request written on a connection.
type sentReq struct {
	xid   int32
	at    int64 // since born: when its write began
	viaLd bool  // its success reply comes only once the leader has had it
}

// Opcodes whose requests a follower forwards to the leader and answers only
// once the leader has processed them: writes (a transaction), and sync.
const (
	opCreate          = 1
	opDelete          = 2
	opSetData         = 5
	opSetACL          = 7
	opSync            = 9
	opCheck           = 13
	opMulti           = 14
	opCreate2         = 15
	opReconfig        = 16
	opCreateContainer = 19
	opCreateTTL       = 21
)

func viaLeader(op int32) bool {
	switch op {
	case opCreate, opDelete, opSetData, opSetACL, opSync, opCheck, opMulti,
		opCreate2, opReconfig, opCreateContainer, opCreateTTL:
		return true
	}
	return false
}

// handshakeBudget is how long one server gets to answer a new connection,
// dial included: the timeout shared among the servers, as the Java client
// does (ClientCnxn's connectTimeout). go-zookeeper waits 10 × its read
// timeout (6.7 × the session timeout) for a connect response; a server that
// accepts TCP and never answers (a stopped JVM) would hold a new session,
// or a reconnection, that long before the next server is tried.
func (s *session) handshakeBudget() time.Duration {
	return time.Duration(s.timeout.Load()) / time.Duration(len(s.l.servers))
}

func (s *session) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	start := time.Now()
	budget := s.handshakeBudget()
	c, err := s.l.cfg.dialer(network, addr, min(timeout, budget))
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, s: s, hsBy: start.Add(budget)}
	_ = c.SetDeadline(tc.hsBy) // in case go-zookeeper sets none
	s.tc.Store(tc)
	return tc, nil
}

// within caps a deadline at the handshake's budget until the connect
// response is in.
func (c *trackedConn) within(t time.Time) time.Time {
	if c.hsDone.Load() || (!t.IsZero() && t.Before(c.hsBy)) {
		return t
	}
	return c.hsBy
}

func (c *trackedConn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(c.within(t)) }

func (c *trackedConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.within(t))
}

func (c *trackedConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.within(t))
}

// Write records the requests in p before they go, so a reply read at once
// finds its request.
func (c *trackedConn) Write(p []byte) (int, error) {
	at := c.s.now()
	for q := p; len(q) > 0; {
		var fr zkwire.Frame
		var ok bool
		if q, fr, ok = c.out.Next(q); ok {
			c.wrote(fr, at)
		}
	}
	return c.Conn.Write(p)
}

func (c *trackedConn) wrote(fr zkwire.Frame, at int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fr.Index == 0 {
		c.connectSent = at
	} else if xid, ok := fr.Xid(); ok {
		op, _ := fr.Op()
		c.sent = append(c.sent, sentReq{xid: xid, at: at, viaLd: viaLeader(op)})
	}
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.s.heard()
		for q := p[:n]; len(q) > 0; {
			var fr zkwire.Frame
			var ok bool
			if q, fr, ok = c.in.Next(q); ok {
				c.replied(fr)
			}
		}
	}
	if err != nil {
		_ = c.Conn.Close()
	}
	return n, err
}

// replied handles the start of a frame read: the connect response, a
// reply, a notification (xid -1: no request's).
func (c *trackedConn) replied(fr zkwire.Frame) {
	if fr.Index == 0 {
		c.hsDone.Store(true)
		if fr.Size > len(fr.Start) {
			return // bigger than any connect response
		}
		info, err := zkwire.ParseConnectResponse(fr.Start)
		if err != nil {
			return
		}
		c.s.handshook(info)
		if info.SessionID != 0 && info.Timeout > 0 { // not refused, not expired
			c.mu.Lock()
			at := c.connectSent
			c.mu.Unlock()
			// A follower re-attaching a session asks the leader first
			// (revalidation), and a new session is a transaction.
			c.s.answered(at)
			c.s.confirmed(at)
		}
		return
	}
	xid, ok := fr.Xid()
	if !ok || xid == -1 {
		return
	}
	// The servers answer a connection's requests in order (the Java client
	// insists on it), so the reply is for the oldest request; matching by
	// xid keeps the answer right even if not: the servers read the request
	// with this xid, whichever it is (pings, all -2, are answered in order
	// among themselves, and an earlier ping's send time is the safe side).
	c.mu.Lock()
	at, found, viaLd := int64(0), false, false
	for i := c.head; i < len(c.sent); i++ {
		if c.sent[i].xid == xid {
			at, found, viaLd = c.sent[i].at, true, c.sent[i].viaLd
			c.head = i + 1 // anything older was answered, or never will be
			break
		}
	}
	switch {
	case c.head == len(c.sent):
		c.sent, c.head = c.sent[:0], 0
	case c.head >= 64 && 2*c.head >= len(c.sent):
		n := copy(c.sent, c.sent[c.head:])
		c.sent, c.head = c.sent[:n], 0
	}
	c.mu.Unlock()
	if !found {
		return
	}
	c.s.answered(at)
	// An error may be the follower's own (a read-only server refusing a
	// write): only success proves the leader had the request.
	if code, ok := fr.Err(); ok && code == 0 && viaLd {
		c.s.confirmed(at)
	}
}

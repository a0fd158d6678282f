package pgproxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"sync"
	"time"
)

// conn is one proxied client connection and its upstream connection. The
// frontend goroutine owns stmts, portals and execs; mu guards the rest.
type conn struct {
	proxy  *Proxy
	id     uint64
	client net.Conn

	stmts   map[string]string // prepared statement name → text
	portals map[string]string // portal name → statement text
	execs   int               // Executes forwarded since the last Sync

	mu     sync.Mutex
	server net.Conn
	closed bool
	// txnStatus is the status byte of the last ReadyForQuery forwarded to
	// the client (txnIdle, ...; 0 before the first): the server's word on
	// whether a transaction is open, which statement text cannot give (a
	// BEGIN in a multi-statement Query, or behind a comment).
	txnStatus  byte
	syncPoints int // start-up, Query, FunctionCall and Sync messages forwarded: each gets one ReadyForQuery
	readyCount int // ReadyForQuery messages seen from the server
	// dropAfter is -1, or the number of ReadyForQuery messages to forward
	// before the answers of the dropped statement's group start: from there
	// on nothing reaches the client.
	dropAfter int
	// dropSkip is the number of statements of the dropped one's group
	// answered before it: the Executes before it since the last Sync, 0 for
	// a Query (which the proxy sees as one statement).
	dropSkip int
	drop     *Drop
	dropOnce sync.Once
	// ackTimer ends the wait for a dropped statement's answer.
	ackTimer *time.Timer
}

// maxStatements bounds the prepared statements and portals remembered per
// connection (pgx caches 512 statements by default); beyond it, new names
// are not remembered and their Execute is not recognised (as a transaction
// boundary, or as a statement to drop).
const maxStatements = 4096

func (c *conn) serve() {
	defer c.closeBoth()
	server, err := net.DialTimeout("tcp", c.proxy.upstream, dialTimeout)
	if err != nil {
		return // the client sees its connection closed, as with a dead server
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = server.Close()
		return
	}
	c.server = server
	c.mu.Unlock()

	c.stmts = make(map[string]string)
	c.portals = make(map[string]string)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.closeBoth()
		c.backend(bufio.NewReader(server), c.client)
	}()
	c.frontend(bufio.NewReader(c.client), server)
	c.closeBoth()
	<-done
	c.settleDrop()
}

// settleDrop records a drop still waiting for its answer when the
// connection ended (the server or Proxy.Close cut it) as unknown, and stops
// its timer: serve returns with the drop recorded, so nothing is recorded
// after Close.
func (c *conn) settleDrop() {
	c.mu.Lock()
	timer, pending := c.ackTimer, c.drop != nil
	c.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	if pending {
		c.finishDrop(nil, 0) // a no-op once the answer or the timer has finished it
	}
}

func (c *conn) closeBoth() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	_ = c.client.Close()
	if c.server != nil {
		_ = c.server.Close()
	}
}

// frontend forwards the client's messages to the server until either side
// closes or a statement whose answer is dropped has been sent.
func (c *conn) frontend(r *bufio.Reader, server net.Conn) {
	w := bufio.NewWriter(server)
	if !c.startup(r, w) {
		return
	}
	stopAtSync := false
	for {
		h, err := readHeader(r)
		if err != nil {
			return
		}
		var payload []byte
		inspect := h.n <= maxParsed && bytes.IndexByte([]byte("QPBECS"), h.typ) >= 0
		if inspect {
			payload = make([]byte, h.n)
			if _, err := io.ReadFull(r, payload); err != nil {
				return
			}
		}
		stopNow := false
		switch h.typ {
		case 'Q':
			if s, ok := cstrings(payload, 1); ok {
				stopNow = c.statement(s[0], 0)
			}
		case 'P':
			if s, ok := cstrings(payload, 2); ok {
				remember(c.stmts, s[0], s[1])
			}
		case 'B':
			if s, ok := cstrings(payload, 2); ok {
				remember(c.portals, s[0], c.stmts[s[1]])
			}
		case 'E':
			if s, ok := cstrings(payload, 1); ok && c.statement(c.portals[s[0]], c.execs) {
				// The server answers an Execute after the Sync that ends its
				// group; the Sync still has to reach it.
				stopAtSync = true
			}
			c.execs++
		case 'S':
			c.execs = 0
		case 'C':
			if len(payload) > 1 {
				if s, ok := cstrings(payload[1:], 1); ok {
					forget(c.stmts, c.portals, payload[0], s[0])
				}
			}
		}
		if _, err := w.Write(h.bytes()); err != nil {
			return
		}
		if inspect {
			_, err = w.Write(payload)
		} else {
			_, err = io.CopyN(w, r, int64(h.n))
		}
		if err != nil {
			return
		}
		if h.typ == 'Q' || h.typ == 'S' || h.typ == 'F' {
			c.mu.Lock()
			c.syncPoints++
			c.mu.Unlock()
		}
		if r.Buffered() == 0 || stopNow || (stopAtSync && h.typ == 'S') {
			if err := w.Flush(); err != nil {
				return
			}
		}
		if stopNow || (stopAtSync && h.typ == 'S') || h.typ == 'X' {
			// Nothing more goes upstream on this connection: wait for the
			// backend side to finish the drop and close both.
			_, _ = io.Copy(io.Discard, r)
			return
		}
	}
}

// startup handles the untyped start-up messages: encryption requests get a
// "no" from the proxy, a cancel request or a start-up message goes
// upstream. It reports whether typed messages follow.
func (c *conn) startup(r *bufio.Reader, w *bufio.Writer) bool {
	for {
		msg, code, err := readStartup(r)
		if err != nil {
			return false
		}
		if code == sslRequestCode || code == gssEncRequestCode {
			if _, err := c.client.Write([]byte{'N'}); err != nil {
				return false
			}
			continue
		}
		if _, err := w.Write(msg); err != nil {
			return false
		}
		if err := w.Flush(); err != nil {
			return false
		}
		if code == cancelRequestCode {
			_, _ = io.Copy(io.Discard, r)
			return false
		}
		// The server ends the start-up (authentication, parameters) with a
		// ReadyForQuery of its own.
		c.mu.Lock()
		c.syncPoints++
		c.mu.Unlock()
		return true
	}
}

// statement looks at one statement about to be forwarded, with skip
// statements of its group before it, and, if it would commit by itself (the
// server last said no transaction was open) and the proxy is armed for it,
// starts dropping: it reports whether its answer will be dropped. A
// statement sent before the server's ReadyForQuery for the one before it
// may still land in a transaction (a pipeline, a multi-statement Query), or
// be rolled back later in its group: the group's answers and its
// ReadyForQuery tell, and Drop.Committed heeds them.
func (c *conn) statement(sql string, skip int) bool {
	if sql == "" || endsOrStartsTxn(sql) {
		return false
	}
	c.mu.Lock()
	// One drop per connection: the connection ends with the first one's
	// group, and a second would overwrite its record and timer.
	idle, dropping := c.txnStatus == txnIdle, c.drop != nil
	c.mu.Unlock()
	if !idle || dropping {
		return false
	}
	commit := Commit{Conn: c.id, Statement: sql}
	if !c.proxy.shouldDrop(commit) {
		return false
	}
	c.mu.Lock()
	// Set before the statement goes upstream, so the server's answer cannot
	// overtake the decision.
	c.dropAfter, c.dropSkip = c.syncPoints, skip
	c.drop = &Drop{Commit: commit}
	c.ackTimer = time.AfterFunc(c.proxy.cfg.ackTimeout, func() { c.finishDrop(nil, 0) })
	c.mu.Unlock()
	return true
}

// finishDrop records the dropped statement with the server's answers and
// the transaction status that ended its group, and closes both
// connections; the first call wins.
func (c *conn) finishDrop(answers []string, status byte) {
	c.dropOnce.Do(func() {
		c.mu.Lock()
		d := *c.drop
		c.mu.Unlock()
		d.Answers, d.TxnStatus = answers, status
		if len(answers) > 0 {
			d.Answer = answers[len(answers)-1]
		}
		d.At = time.Now()
		// Recorded before the connections close: a client that sees its
		// connection end must find the drop in Dropped.
		c.proxy.recordDrop(d)
		c.closeBoth()
	})
}

// backend forwards the server's messages to the client, except the answers
// of a dropped statement's group, which it reads to learn the outcome and
// discards.
func (c *conn) backend(r *bufio.Reader, client net.Conn) {
	w := bufio.NewWriter(client)
	var answers []string
	answered := 0 // statements of the dropped one's group answered so far
	for {
		h, err := readHeader(r)
		if err != nil {
			return
		}
		c.mu.Lock()
		suppress := c.dropAfter >= 0 && c.readyCount >= c.dropAfter
		skip := c.dropSkip
		c.mu.Unlock()
		if h.typ == 'Z' {
			status, ok := c.ready(r, h)
			if !ok {
				return
			}
			if suppress {
				// Flush what was forwarded before the drop started, then cut.
				_ = w.Flush()
				c.finishDrop(answers, status)
				return
			}
			if _, err := w.Write(append(h.bytes(), status)); err != nil {
				return
			}
			if r.Buffered() == 0 {
				if err := w.Flush(); err != nil {
					return
				}
			}
			continue
		}
		if !suppress {
			if _, err := w.Write(h.bytes()); err != nil {
				return
			}
			if _, err := io.CopyN(w, r, int64(h.n)); err != nil {
				return
			}
			if r.Buffered() == 0 {
				if err := w.Flush(); err != nil {
					return
				}
			}
			continue
		}
		if h.n > maxParsed {
			if _, err := io.CopyN(io.Discard, r, int64(h.n)); err != nil {
				return
			}
			continue
		}
		payload := make([]byte, h.n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		switch h.typ {
		case 'C':
			// A statement before the dropped one says nothing of it: a
			// ROLLBACK there ended an earlier transaction.
			if s, ok := cstrings(payload, 1); ok && answered >= skip {
				answers = append(answers, s[0])
			}
			answered++
		case 'I', 's': // EmptyQueryResponse, PortalSuspended
			answered++
		case 'E':
			// Wherever it comes in the group, an error rolls the group's
			// implicit transaction back, or skips the dropped statement.
			answers = append(answers, "error: "+errorMessage(payload))
			answered++
		}
	}
}

// ready reads the payload of a ReadyForQuery, its transaction status byte,
// and counts it; the status is kept before the message is forwarded, so
// the client's next statement finds it. ok is false for a malformed one.
func (c *conn) ready(r *bufio.Reader, h header) (status byte, ok bool) {
	if h.n != 1 {
		return 0, false
	}
	status, err := r.ReadByte()
	if err != nil {
		return 0, false
	}
	c.mu.Lock()
	c.readyCount++
	c.txnStatus = status
	c.mu.Unlock()
	return status, true
}

// errorMessage extracts the message field ('M') of an ErrorResponse.
func errorMessage(payload []byte) string {
	for len(payload) > 1 && payload[0] != 0 {
		field := payload[0]
		end := bytes.IndexByte(payload[1:], 0)
		if end < 0 {
			break
		}
		if field == 'M' {
			return string(payload[1 : 1+end])
		}
		payload = payload[2+end:]
	}
	return "unreadable error response"
}

func remember(m map[string]string, name, text string) {
	if _, ok := m[name]; ok || len(m) < maxStatements {
		m[name] = text
	}
}

// forget drops a closed statement ('S') or portal ('P').
func forget(stmts, portals map[string]string, kind byte, name string) {
	switch kind {
	case 'S':
		delete(stmts, name)
	case 'P':
		delete(portals, name)
	}
}

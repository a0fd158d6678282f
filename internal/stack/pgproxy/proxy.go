package pgproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	// listenAddr lets the kernel pick a free loopback port.
	listenAddr = "127.0.0.1:0"
	// dialTimeout bounds connecting to the upstream server.
	dialTimeout = 5 * time.Second
	// DefaultAckTimeout bounds the wait for the server's answer to a
	// statement whose answer is being dropped; when it passes the
	// connections are closed anyway and the Drop says the outcome is
	// unknown.
	DefaultAckTimeout = 10 * time.Second
)

// Option configures New.
type Option func(*config)

type config struct {
	ackTimeout time.Duration
}

// WithAckTimeout bounds the wait for a dropped statement's answer (default
// DefaultAckTimeout).
func WithAckTimeout(d time.Duration) Option { return func(c *config) { c.ackTimeout = d } }

// Commit describes a statement sent while the server said no transaction
// was open, which commits by itself when it completes, for a predicate to
// decide on.
type Commit struct {
	// Conn numbers the client connection (1, 2, ... in accept order).
	Conn uint64
	// Statement is its text as the client sent it.
	Statement string
}

// Drop records a statement whose answer the proxy dropped.
type Drop struct {
	Commit
	// Answers are what the server answered, which the client never saw,
	// from the dropped statement to the end of its group (its Query, or the
	// Executes up to its Sync), in order: command tags ("INSERT 0 1"), and
	// "error: ..." for an error response anywhere in the group. A Query is
	// one statement to the proxy: all its answers are there. Empty when no
	// answer came within the ack timeout (the outcome is then unknown to
	// the proxy too).
	Answers []string
	// Answer is the last of Answers, or "".
	Answer string
	// TxnStatus is the transaction status of the server's ReadyForQuery
	// that ended the group: 'I' when no transaction is open any more, 'T'
	// or 'E' when the statement ran inside one (a BEGIN earlier in the same
	// Query, say), which the server rolls back as the proxy cuts the
	// connection; 0 without an answer.
	TxnStatus byte
	// At is when the connections were closed.
	At time.Time
}

// Committed reports whether the server committed the dropped statement,
// judged from its group's answers: some answer came; none is an error (an
// error rolls the group's implicit transaction back, or the statement never
// ran) nor a ROLLBACK tag (which rolls it back too, and is also what a
// COMMIT of a failed transaction answers); and the group's ReadyForQuery
// says no transaction is open. It errs towards not committed when a COMMIT
// in the group made the statement durable before a later error or
// ROLLBACK.
func (d Drop) Committed() bool {
	if d.TxnStatus != txnIdle || d.Answer == "" {
		return false
	}
	// Answer alone, in a Drop built without Answers, is judged the same.
	for _, a := range append([]string{d.Answer}, d.Answers...) {
		if a == "ROLLBACK" || strings.HasPrefix(a, "error: ") {
			return false
		}
	}
	return true
}

// Proxy forwards connections from its listen address to one upstream
// Postgres server. Its methods are safe for concurrent use.
type Proxy struct {
	cfg      config
	upstream string
	ln       net.Listener

	mu      sync.Mutex
	armed   int
	match   func(Commit) bool
	dropped []Drop
	conns   map[*conn]struct{}
	nextID  uint64
	closed  bool

	wg sync.WaitGroup
}

// New listens on a free loopback port and forwards every accepted
// connection to upstream (host:port). Close stops it.
func New(ctx context.Context, upstream string, opts ...Option) (*Proxy, error) {
	cfg := config{ackTimeout: DefaultAckTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("pgproxy: listen %s: %w", listenAddr, err)
	}
	p := &Proxy{cfg: cfg, upstream: upstream, ln: ln, conns: make(map[*conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// ArmAutocommit makes the proxy drop the answers of the next n statements
// outside an explicit transaction for which match returns true (every such
// statement when match is nil), replacing any earlier arming. Such a
// statement commits by itself when it completes, so losing its answer is a
// lost commit acknowledgement: the one a single-statement write, which
// never sends COMMIT, can suffer. A connection loses one answer at most:
// statements after the dropped one in its Sync group go upstream with it,
// unrecorded, and spend no arming. ArmAutocommit(0, nil) disarms; match
// runs on a connection's goroutine and must not block.
func (p *Proxy) ArmAutocommit(n int, match func(Commit) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.match = max(n, 0), match
}

// Dropped returns the statements whose answers were dropped, oldest first.
func (p *Proxy) Dropped() []Drop {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.dropped)
}

// shouldDrop decides whether to lose a statement's answer.
func (p *Proxy) shouldDrop(c Commit) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed == 0 || (p.match != nil && !p.match(c)) {
		return false
	}
	p.armed--
	return true
}

func (p *Proxy) recordDrop(d Drop) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropped = append(p.dropped, d)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed; a listener error ends the proxy either way
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			return
		}
		p.nextID++
		c := &conn{proxy: p, id: p.nextID, client: client, dropAfter: -1}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			c.serve()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}()
	}
}

// Close stops listening, closes every proxied connection and waits for
// their goroutines; safe to call twice.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.closeBoth()
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("pgproxy: close listener: %w", err)
	}
	return nil
}

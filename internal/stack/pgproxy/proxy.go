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

// Defaults of the options.
const (
	// DefaultListenAddr lets the kernel pick a free loopback port.
	DefaultListenAddr = "127.0.0.1:0"
	// DefaultDialTimeout bounds connecting to the upstream server.
	DefaultDialTimeout = 5 * time.Second
	// DefaultAckTimeout bounds the wait for the server's answer to a
	// COMMIT whose answer is being dropped; when it passes the connections
	// are closed anyway and the Drop says the outcome is unknown.
	DefaultAckTimeout = 10 * time.Second
)

// maxTxnStatements bounds the statement texts kept per open transaction for
// Commit.Statements; later statements of a long transaction are not kept.
const maxTxnStatements = 256

// Option configures New.
type Option func(*config)

type config struct {
	listenAddr  string
	dialTimeout time.Duration
	ackTimeout  time.Duration
}

// WithListenAddr listens on addr (host:port) instead of DefaultListenAddr.
func WithListenAddr(addr string) Option { return func(c *config) { c.listenAddr = addr } }

// WithDialTimeout bounds connecting upstream (default DefaultDialTimeout).
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithAckTimeout bounds the wait for a dropped commit's answer (default
// DefaultAckTimeout).
func WithAckTimeout(d time.Duration) Option { return func(c *config) { c.ackTimeout = d } }

// Commit describes a COMMIT the proxy saw, for a predicate to decide on.
type Commit struct {
	// Conn numbers the client connection (1, 2, ... in accept order).
	Conn uint64
	// Statements holds the texts of the statements the transaction ran,
	// after BEGIN and before COMMIT, as the client sent them (at most
	// maxTxnStatements).
	Statements []string
	// Implicit marks a statement that ran outside an explicit transaction
	// and so committed on its own (see ArmAutocommit); Statements then holds
	// it alone.
	Implicit bool
}

// Drop records a commit whose answer the proxy dropped.
type Drop struct {
	Commit
	// Answer is what the server answered, which the client never saw: the
	// command tag ("COMMIT", or "ROLLBACK" for a transaction that had
	// failed), "error: ..." for an error response, or "" when no answer came
	// within the ack timeout (the outcome is then unknown to the proxy too).
	Answer string
	// At is when the connections were closed.
	At time.Time
}

// Committed reports whether the server committed the dropped transaction:
// a COMMIT answered COMMIT, or an autocommitted statement that completed.
func (d Drop) Committed() bool {
	if d.Implicit {
		return d.Answer != "" && !strings.HasPrefix(d.Answer, "error: ")
	}
	return d.Answer == "COMMIT"
}

// Proxy forwards connections from its listen address to one upstream
// Postgres server. Its methods are safe for concurrent use.
type Proxy struct {
	cfg      config
	upstream string
	ln       net.Listener

	mu    sync.Mutex
	armed int
	match func(Commit) bool
	// implicitArmed and implicitMatch are ArmAutocommit's.
	implicitArmed int
	implicitMatch func(Commit) bool
	commits       int
	dropped       []Drop
	conns         map[*conn]struct{}
	nextID        uint64
	closed        bool

	wg sync.WaitGroup
}

// New listens and starts forwarding every accepted connection to upstream
// (host:port). Close stops it.
func New(ctx context.Context, upstream string, opts ...Option) (*Proxy, error) {
	cfg := config{listenAddr: DefaultListenAddr, dialTimeout: DefaultDialTimeout, ackTimeout: DefaultAckTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.listenAddr)
	if err != nil {
		return nil, fmt.Errorf("pgproxy: listen %s: %w", cfg.listenAddr, err)
	}
	p := &Proxy{cfg: cfg, upstream: upstream, ln: ln, conns: make(map[*conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Arm makes the proxy drop the answers of the next n commits for which match
// returns true (every commit when match is nil), replacing any earlier
// arming. Arm(0, nil) disarms. match runs on a connection's goroutine and
// must not block.
func (p *Proxy) Arm(n int, match func(Commit) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.match = max(n, 0), match
}

// ArmAutocommit makes the proxy drop the answers of the next n statements
// outside an explicit transaction for which match returns true (every such
// statement when match is nil), replacing any earlier ArmAutocommit. Such a
// statement commits by itself when it completes, so losing its answer is a
// lost commit acknowledgement too: the one a single-statement write, which
// never sends COMMIT, can suffer. The Commit offered to match has Implicit
// set and the statement as its only Statements. ArmAutocommit(0, nil)
// disarms; match must not block.
func (p *Proxy) ArmAutocommit(n int, match func(Commit) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.implicitArmed, p.implicitMatch = max(n, 0), match
}

// Armed returns how many commits are still to be dropped.
func (p *Proxy) Armed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.armed + p.implicitArmed
}

// Commits counts the COMMITs the proxy saw, dropped or forwarded.
func (p *Proxy) Commits() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.commits
}

// Dropped returns the commits whose answers were dropped, oldest first.
func (p *Proxy) Dropped() []Drop {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.dropped)
}

// shouldDrop counts a commit and decides whether to lose its answer.
func (p *Proxy) shouldDrop(c Commit) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.Implicit {
		if p.implicitArmed == 0 || (p.implicitMatch != nil && !p.implicitMatch(c)) {
			return false
		}
		p.implicitArmed--
		return true
	}
	p.commits++
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

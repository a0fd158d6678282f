package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// forwarder is a TCP proxy on a free loopback port. Clients that were
// given its address (the service instances, a replica's link to its
// master) can be moved to another upstream without a restart, and the bytes
// it carries can be held back: the two things a failover scenario needs
// that a signal to a server process cannot do. Held bytes are never
// delivered once the connection is dropped, which is what makes replication
// lag real: a SIGSTOPped replica would still read, after SIGCONT, whatever
// its kernel had buffered.
type forwarder struct {
	ln net.Listener

	mu       sync.Mutex
	upstream string
	// dial opens the upstream connection of an accepted client.
	dial   func(address string) (net.Conn, error)
	open   chan struct{} // closed while bytes may pass; replaced by Hold
	pairs  map[*fwdPair]struct{}
	closed bool
	wg     sync.WaitGroup
}

// fwdPair is one client connection and its upstream connection.
type fwdPair struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

func (p *fwdPair) close() {
	p.once.Do(func() {
		close(p.done)
		_ = p.client.Close()
		_ = p.server.Close()
	})
}

// newForwarder listens on 127.0.0.1:0 and forwards to upstream.
func newForwarder(upstream string) (*forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("forwarder: %w", err)
	}
	open := make(chan struct{})
	close(open)
	f := &forwarder{ln: ln, upstream: upstream, dial: dialUpstream, open: open, pairs: map[*fwdPair]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

// Addr is the address clients dial.
func (f *forwarder) Addr() string { return f.ln.Addr().String() }

// Switch sends new connections to upstream and drops the existing ones, so
// that clients redial and land on the new upstream.
func (f *forwarder) Switch(upstream string) {
	f.mu.Lock()
	f.upstream = upstream
	f.mu.Unlock()
	f.Drop()
}

// Hold stops passing bytes in either direction; connections stay open and
// what arrives waits in the forwarder until Release, or is discarded by
// Drop.
func (f *forwarder) Hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.open:
		f.open = make(chan struct{})
	default: // already held
	}
}

// Release lets bytes pass again.
func (f *forwarder) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.open:
	default:
		close(f.open)
	}
}

// Drop closes every connection; bytes held back are discarded.
func (f *forwarder) Drop() {
	f.mu.Lock()
	pairs := make([]*fwdPair, 0, len(f.pairs))
	for p := range f.pairs {
		pairs = append(pairs, p)
	}
	f.mu.Unlock()
	for _, p := range pairs {
		p.close()
	}
}

// Close stops listening, drops every connection and waits for the copying
// goroutines to end.
func (f *forwarder) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	err := f.ln.Close()
	f.Release() // wake held copies so they see their connection closed
	f.Drop()
	f.wg.Wait()
	return err
}

func (f *forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.mu.Lock()
		up, dial := f.upstream, f.dial
		f.mu.Unlock()
		s, err := dial(up)
		if err != nil {
			// A dead upstream looks to the client like a dead server.
			_ = c.Close()
			continue
		}
		p := &fwdPair{client: c, server: s, done: make(chan struct{})}
		// Registered under the lock that Close takes to set closed: a Close
		// during the dial has dropped the pairs it knew and waits for the
		// goroutines, so this pair must not start.
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			p.close()
			return
		}
		f.pairs[p] = struct{}{}
		f.wg.Add(2)
		f.mu.Unlock()
		go f.pipe(p, s, c)
		go f.pipe(p, c, s)
	}
}

// dialUpstream is a forwarder's dial: an upstream that does not answer
// within 2 s is taken for dead.
func dialUpstream(address string) (net.Conn, error) {
	return net.DialTimeout("tcp", address, 2*time.Second)
}

// pipe copies src to dst until either side ends, then ends the pair.
func (f *forwarder) pipe(p *fwdPair, dst, src net.Conn) {
	defer f.wg.Done()
	_, _ = io.Copy(dst, gatedReader{r: src, f: f, done: p.done})
	p.close()
	f.mu.Lock()
	delete(f.pairs, p)
	f.mu.Unlock()
}

// gatedReader waits, after each read, until the forwarder lets bytes pass.
// Waiting after the read rather than before means a chunk read just as
// Hold was called is held too, not slipped through.
type gatedReader struct {
	r    io.Reader
	f    *forwarder
	done <-chan struct{}
}

var errDropped = errors.New("forwarder: connection dropped")

func (g gatedReader) Read(b []byte) (int, error) {
	n, err := g.r.Read(b)
	g.f.mu.Lock()
	open := g.f.open
	g.f.mu.Unlock()
	select {
	case <-open:
	case <-g.done:
		return 0, errDropped
	}
	select {
	case <-g.done:
		return 0, errDropped // dropped while held: the bytes are gone
	default:
	}
	return n, err
}

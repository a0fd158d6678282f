package postgres_test

import (
	"context"
	"io"
	"net"
	neturl "net/url"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// freezer forwards TCP connections to a server; frozen, it forwards
// nothing (sockets stay open), as a frozen host or a partition would.
type freezer struct {
	ln     net.Listener
	mu     sync.Mutex
	frozen bool
	thawed chan struct{}
	conns  []net.Conn
}

func newFreezer(t *testing.T, dsn string) (*freezer, string) {
	t.Helper()
	u, err := neturl.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, thawed: make(chan struct{})}
	target := u.Host
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, s)
			f.mu.Unlock()
			go f.pipe(c, s)
			go f.pipe(s, c)
		}
	}()
	t.Cleanup(func() {
		f.thaw()
		_ = ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
	})
	u.Host = ln.Addr().String()
	return f, u.String()
}

func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			frozen, thawed := f.frozen, f.thawed
			f.mu.Unlock()
			if frozen {
				<-thawed
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = dst.Close()
			}
			return
		}
	}
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen {
		f.frozen, f.thawed = true, make(chan struct{})
	}
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		f.frozen = false
		close(f.thawed)
	}
}

// frozenStore opens a store on a migrated scratch database through a
// freezer, thawed and closed at the test's end.
func frozenStore(t *testing.T, ctx context.Context) (*freezer, *postgres.Store) {
	t.Helper()
	dsn := stacktest.NewDatabase(t, ctx)
	openMigrated(t, dsn)
	fr, url := newFreezer(t, dsn)
	s, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fr.thaw(); _ = s.Close() })
	return fr, s
}

// TestConcurrentFirstCallsKeepTheirOwnDeadline: two first callers of one
// of the store's gorm queries (KnownSKUs, SKU, Audit, whyMissing, Claim's
// create) against a silent server: the second returns at its own deadline,
// not the first one's. With gorm's statement cache (PrepareStmt) it waited
// for the first caller's prepare without a context: 300 ms asked, about
// 4 s taken.
func TestConcurrentFirstCallsKeepTheirOwnDeadline(t *testing.T) {
	ctx := context.Background()
	fr, s := frozenStore(t, ctx)

	fr.freeze()
	// Request A: a generous budget (the service's store calls have 10 s).
	actx, acancel := context.WithTimeout(ctx, 3*time.Second)
	defer acancel()
	go func() { _, _ = s.KnownSKUs(actx, []string{"a"}) }()
	time.Sleep(200 * time.Millisecond)

	// Request B: a short deadline, the same query.
	const bDeadline = 300 * time.Millisecond
	bctx, bcancel := context.WithTimeout(ctx, bDeadline)
	defer bcancel()
	start := time.Now()
	_, berr := s.KnownSKUs(bctx, []string{"b"})
	took := time.Since(start)
	t.Logf("B (deadline %v) returned after %v: %v", bDeadline, took, berr)
	// The store's own allowance past a deadline is cancelDelay (1 s).
	if limit := bDeadline + time.Second + 300*time.Millisecond; took > limit {
		t.Fatalf("KnownSKUs with a %v deadline returned after %v (> %v): it waited for another request's prepare", bDeadline, took, limit)
	}
}

// TestOneCallersCancelFailsNoOther: a request that gives up (a client
// gone) while its query is first prepared fails no concurrent request with
// time left on a server that answers again (gorm's statement cache handed
// the first caller's cancellation to every caller waiting for its prepare:
// a 499 for a client that had not gone).
func TestOneCallersCancelFailsNoOther(t *testing.T) {
	ctx := context.Background()
	fr, s := frozenStore(t, ctx)

	fr.freeze() // a hiccup: the server is silent for a moment
	actx, acancel := context.WithCancel(ctx)
	go func() { _, _ = s.KnownSKUs(actx, []string{"a"}) }()
	time.Sleep(200 * time.Millisecond)
	bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
	defer bcancel()
	berr := make(chan error, 1)
	go func() { _, err := s.KnownSKUs(bctx, []string{"b"}); berr <- err }()
	time.Sleep(200 * time.Millisecond)
	acancel() // A's client goes away
	time.Sleep(100 * time.Millisecond)
	fr.thaw() // the server answers again
	err := <-berr
	t.Logf("B (10 s budget, server answering again): %v", err)
	if err != nil {
		t.Fatalf("KnownSKUs with 10 s left on a server that answers failed with another request's error: %v", err)
	}
}

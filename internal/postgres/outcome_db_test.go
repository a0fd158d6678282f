package postgres_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/postgres"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// A write cut short by its context or its connection must not be reported
// as "nothing was written" when it may yet commit: each test makes the
// write wait on a row lock another session holds, ends it from the client
// side, then lets the lock go and checks the error against what the
// database ends up with.

func TestTimedOutWriteIsCancelledOnTheServer(t *testing.T) {
	ctx := context.Background()
	dsn := stacktest.NewDatabase(t, ctx)
	direct := openMigrated(t, dsn)
	// One connection: the same backend before and after shows it survived.
	s := openMigrated(t, dsn, postgres.WithMaxConns(1))
	f := mustStock(t, s, "slow", 5, 1)
	got, err := s.Claim(ctx, []inventory.Fence{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	before := backendPID(t, s)
	release := lockRow(t, dsn, "slow")

	o := newOrder("slow", 2, f.Token)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Write(wctx, []inventory.Fence{f}, decide(got["slow"], 2, o)) }()
	writer := waitingOnLock(t, direct)
	err = <-done
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, inventory.ErrOutcomeUnknown) {
		t.Fatalf("write past its deadline = %v, want the deadline's error, outcome known", err)
	}
	release()
	// A statement the server kept running would now take the row and commit.
	waitSettled(t, direct, writer)
	if placed, err := direct.Order(ctx, o.ID); !errors.Is(err, inventory.ErrUnknownOrder) {
		t.Fatalf("the timed-out write committed anyway: order %+v, %v", placed, err)
	}
	if k, _ := direct.SKU(ctx, "slow"); k.Available != 5 || k.Reserved != 0 {
		t.Fatalf("sku after the timed-out write: %+v, want untouched", k)
	}
	if after := backendPID(t, s); after != before {
		t.Errorf("the connection was replaced (backend %d, then %d): a cancel must not cost the pool one", before, after)
	}
}

func TestUnansweredWriteIsOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	dsn := stacktest.NewDatabase(t, ctx)
	direct := openMigrated(t, dsn)
	p := newProxy(t, mustURL(t, dsn).Host)
	s := openMigrated(t, p.url(t, dsn))
	f := mustStock(t, s, "cut", 5, 1)
	got, err := s.Claim(ctx, []inventory.Fence{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	release := lockRow(t, dsn, "cut")

	o := newOrder("cut", 2, f.Token)
	done := make(chan error, 1)
	go func() { done <- s.Write(ctx, []inventory.Fence{f}, decide(got["cut"], 2, o)) }()
	writer := waitingOnLock(t, direct)
	p.cut()
	err = <-done
	if !errors.Is(err, inventory.ErrOutcomeUnknown) || !errors.Is(err, inventory.ErrStoreUnavailable) {
		t.Fatalf("write whose connection broke = %v, want ErrOutcomeUnknown and ErrStoreUnavailable", err)
	}
	release()
	// The server settles the statement on its own; once it has, the
	// outcome is final, and it must be whole either way.
	waitSettled(t, direct, writer)
	_, oerr := direct.Order(ctx, o.ID)
	k, _ := direct.SKU(ctx, "cut")
	switch {
	case oerr == nil && k.Available == 3 && k.Reserved == 2:
		t.Log("the write committed after its connection broke")
	case errors.Is(oerr, inventory.ErrUnknownOrder) && k.Available == 5 && k.Reserved == 0:
		t.Log("the write was rolled back")
	default:
		t.Fatalf("after the broken write: order %v, sku %+v: neither applied whole nor not at all", oerr, k)
	}
}

// TestStatementTimeoutDefault: a store's connections carry a statement
// timeout below the service's store timeout, unless the URL sets its own,
// as a parameter or in its options (or PGOPTIONS, which URL options
// replace). A setting of the database's (ALTER DATABASE ... SET) does not
// count: the default beats it.
func TestStatementTimeoutDefault(t *testing.T) {
	ctx := context.Background()
	dsn := stacktest.NewDatabase(t, ctx)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := mustURL(t, dsn).Path[1:]
	_, err = db.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET statement_timeout = '20s'")
	_ = db.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ query, pgoptions, want string }{
		{"", "", "8s"},
		{"statement_timeout=250", "", "250ms"},
		{"statement_timeout=0", "", "0"},
		{"options=-c%20statement_timeout%3D30000", "", "30s"},
		{"options=--statement-timeout%3D1min%20-c%20lock_timeout%3D1s", "", "1min"},
		{"", "-c statement_timeout=45s", "45s"},
		{"options=-c%20lock_timeout%3D1s", "-c statement_timeout=45s", "8s"},
	} {
		t.Run(c.query+" "+c.pgoptions, func(t *testing.T) {
			if c.pgoptions != "" {
				t.Setenv("PGOPTIONS", c.pgoptions)
			}
			u := mustURL(t, dsn)
			if c.query != "" {
				if u.RawQuery != "" {
					u.RawQuery += "&"
				}
				u.RawQuery += c.query
			}
			s, err := postgres.Open(ctx, u.String())
			if err != nil {
				t.Fatal(err)
			}
			var got string
			err = s.DB().QueryRowContext(ctx, "SHOW statement_timeout").Scan(&got)
			_ = s.Close()
			if err != nil || got != c.want {
				t.Errorf("statement_timeout with URL %q, PGOPTIONS %q = %q, %v; want %q",
					c.query, c.pgoptions, got, err, c.want)
			}
		})
	}
}

// TestReadOnlyIsUnavailable: a server that takes no writes (a hot standby,
// a demoted primary) is the database unavailable, not a fault of ours.
func TestReadOnlyIsUnavailable(t *testing.T) {
	ctx := context.Background()
	dsn := stacktest.NewDatabase(t, ctx)
	f := mustStock(t, openMigrated(t, dsn), "ro", 5, 1)
	u := mustURL(t, dsn)
	q := u.Query()
	q.Set("default_transaction_read_only", "on")
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Claim(ctx, []inventory.Fence{f}, false); !errors.Is(err, inventory.ErrStoreUnavailable) {
		t.Errorf("claim on a read-only server = %v, want ErrStoreUnavailable", err)
	}
	k, err := s.SKU(ctx, "ro")
	if err != nil {
		t.Fatalf("read on a read-only server: %v", err)
	}
	err = s.Write(ctx, []inventory.Fence{f}, decide(k, 1, newOrder("ro", 1, f.Token)))
	if !errors.Is(err, inventory.ErrStoreUnavailable) || errors.Is(err, inventory.ErrOutcomeUnknown) {
		t.Errorf("write on a read-only server = %v, want ErrStoreUnavailable, outcome known", err)
	}
}

// TestOnlyCounterChecksAreStock: a counter's CHECK refusing a write is
// insufficient stock; another CHECK (here an order's status) is a bug of
// ours and must not read as the client's shortfall.
func TestOnlyCounterChecksAreStock(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := mustStock(t, s, "chk", 1, 1)
	got, err := s.Claim(ctx, []inventory.Fence{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []inventory.Fence{f}, decide(got["chk"], 2, newOrder("chk", 2, f.Token))); !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Errorf("write taking available below zero = %v, want ErrInsufficientStock", err)
	}
	o := newOrder("chk", 1, f.Token)
	o.Status = "pending" // no longer a status the schema allows
	err = s.Write(ctx, []inventory.Fence{f}, decide(got["chk"], 1, o))
	for _, sentinel := range []error{inventory.ErrInsufficientStock, inventory.ErrInvalid, inventory.ErrStoreUnavailable} {
		if err == nil || errors.Is(err, sentinel) {
			t.Errorf("write of an order with a bad status = %v, want a fault of ours, not %v", err, sentinel)
		}
	}
}

func openMigrated(t *testing.T, dsn string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	ctx := context.Background()
	s, err := postgres.Open(ctx, dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := postgres.Migrate(ctx, s.DB()); err != nil {
		t.Fatal(err)
	}
	return s
}

func backendPID(t *testing.T, s *postgres.Store) int {
	t.Helper()
	var pid int
	if err := s.DB().QueryRowContext(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// lockRow holds sku's row from another session until release.
func lockRow(t *testing.T, dsn, sku string) (release func()) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM skus WHERE sku = $1 FOR UPDATE`, sku); err != nil {
		t.Fatal(err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// waitingOnLock returns the backend of the one statement that waits on a
// row lock in s's database, once it does.
func waitingOnLock(t *testing.T, s *postgres.Store) (pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		err := s.DB().QueryRowContext(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&pid)
		if err == nil {
			return pid
		}
	}
	t.Fatal("no statement came to wait on the row lock")
	return 0
}

// waitSettled waits for backend pid to have no statement running: idle, or
// gone.
func waitSettled(t *testing.T, s *postgres.Store, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := s.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE pid = $1 AND state = 'active'`, pid).Scan(&n); err == nil && n == 0 {
			return
		}
	}
	t.Fatalf("backend %d still runs its statement", pid)
}

// proxy forwards TCP connections to a server until cut, which breaks every
// one of them at once, as a network failure would.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c, target)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

func (p *proxy) forward(client net.Conn, target string) {
	server, err := net.Dial("tcp", target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, client, server)
	p.mu.Unlock()
	go func() {
		_, _ = io.Copy(server, client)
		_ = server.Close()
	}()
	_, _ = io.Copy(client, server)
	_ = client.Close()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// url is dsn with its host replaced by the proxy's.
func (p *proxy) url(t *testing.T, dsn string) string {
	t.Helper()
	u := mustURL(t, dsn)
	u.Host = p.ln.Addr().String()
	return u.String()
}

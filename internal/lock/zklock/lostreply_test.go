package zklock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

// replyDropper is a dialer whose connections, once armed, lose the reply to
// the next multi request: the request reaches the server, which applies it,
// and the connection dies before the answer is read.
type replyDropper struct {
	armed   atomic.Bool
	dropped atomic.Int32
}

func (d *replyDropper) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &droppingConn{Conn: c, d: d}, nil
}

type droppingConn struct {
	net.Conn
	d         *replyDropper
	blackhole atomic.Bool
}

func (c *droppingConn) Write(p []byte) (int, error) {
	// go-zookeeper writes each request whole: length, xid, opcode, body.
	if len(p) >= 12 && int32(binary.BigEndian.Uint32(p[8:12])) == opMulti && c.d.armed.CompareAndSwap(true, false) {
		c.blackhole.Store(true)
		c.d.dropped.Add(1)
	}
	return c.Conn.Write(p)
}

func (c *droppingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.blackhole.Load() {
		// Give the server time to read and apply the request, then die
		// with its answer unread.
		time.Sleep(100 * time.Millisecond)
		_ = c.Conn.Close()
		return 0, errors.New("reply dropped by the test")
	}
	return n, err
}

// syncBuffer is a log sink for handlers writing from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLostCreateReply loses the reply to the create: the Locker must find
// its node again by the uuid in the name, not create a second one (which
// would wait forever behind the first, leaked until the session ends).
func TestLostCreateReply(t *testing.T) {
	servers := sharedZK(t)
	insp := inspector(t, servers)
	var logs syncBuffer
	d := &replyDropper{}
	l := mustLocker(t, servers, WithDialer(d.dial),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	k := key(t)
	mustRelease(t, mustAcquire(t, l, k+"-warm")) // connected, root exists

	d.armed.Store(true)
	lease := mustAcquire(t, l, k)
	if d.dropped.Load() != 1 {
		t.Fatal("no reply was dropped")
	}
	if !strings.Contains(logs.String(), "node found by its uuid") {
		t.Fatalf("the create was not recovered; log:\n%s", logs.String())
	}
	names := children(t, insp, k)
	if len(names) != 1 || !strings.Contains(names[0], lease.ID().String()) {
		t.Fatalf("children = %v, want only the lease's node (%s)", names, lease.ID())
	}
	if _, st := exists(t, insp, testRoot+"/"+k+"/"+names[0]); lease.Token() != lock.Token(st.Czxid) {
		t.Fatalf("token %d, czxid %d", lease.Token(), st.Czxid)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("lease after reconnection: %v", err)
	}
	mustRelease(t, lease)
	if names := children(t, insp, k); len(names) != 0 {
		t.Fatalf("left after release: %v", names)
	}
}

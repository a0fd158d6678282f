package zkwire_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/internal/lock/zklock/zkwire"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// session opens a go-zookeeper session with one ephemeral node and
// returns its credentials, captured from the handshake as zklock does.
func session(t *testing.T, servers []string) (c *zk.Conn, events <-chan zk.Event, node string, id int64, passwd []byte) {
	t.Helper()
	var captured capture
	c, events, err := zk.Connect(servers[:1], 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}), zk.WithDialer(captured.dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	node, err = c.Create("/zkwire-test-"+t.Name(), nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	resp, ok := captured.get()
	if !ok || resp.SessionID != c.SessionID() {
		t.Fatalf("handshake not captured (%+v, session %#x)", resp, c.SessionID())
	}
	return c, events, node, resp.SessionID, resp.Passwd
}

// TestExpireSession ends a live session from outside: its ephemeral node is
// gone at once, its client is told the session expired, and the
// credentials no longer take anything over.
func TestExpireSession(t *testing.T) {
	servers := stacktest.RequireZK(t)
	_, events, node, id, passwd := session(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := zkwire.ExpireSession(ctx, servers[0], id, passwd); err != nil {
		t.Fatal(err)
	}

	// Reads are served by whichever server the inspector reached, which may
	// lag the commit: Sync first, ZooKeeper's way to read what is decided.
	look := inspector(t, servers)
	if _, err := look.Sync(node); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if ok, _, err := look.Exists(node); err != nil || ok {
		t.Fatalf("Exists(%s) after expiry = %v, %v; want gone", node, ok, err)
	}
	deadline := time.After(10 * time.Second)
	for expired := false; !expired; {
		select {
		case ev := <-events:
			expired = ev.State == zk.StateExpired
		case <-deadline:
			t.Fatal("the session's client was not told it expired within 10 s")
		}
	}
	if err := zkwire.ExpireSession(ctx, servers[1], id, passwd); !errors.Is(err, zkwire.ErrUnknownSession) {
		t.Fatalf("expiring it again = %v, want ErrUnknownSession", err)
	}
}

// TestExpireSessionWrongPassword closes nothing: the server refuses the
// takeover and the session and its node live on.
func TestExpireSessionWrongPassword(t *testing.T) {
	servers := stacktest.RequireZK(t)
	c, _, node, id, passwd := session(t, servers)
	wrong := bytes.Clone(passwd)
	wrong[0] ^= 0xff
	if err := zkwire.ExpireSession(context.Background(), servers[0], id, wrong); !errors.Is(err, zkwire.ErrUnknownSession) {
		t.Fatalf("ExpireSession with a wrong password = %v, want ErrUnknownSession", err)
	}
	// The server drops the owner's connection before it checks the
	// password; the owner reconnects into the same session.
	// Until it has, its requests fail with ErrConnectionClosed or, while
	// the server is still busy with the takeover, ErrNoServer.
	ok, _, err := c.Exists(node)
	for deadline := time.Now().Add(10 * time.Second); reconnecting(err) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		ok, _, err = c.Exists(node)
	}
	if err != nil || !ok {
		t.Fatalf("Exists(%s) = %v, %v; want the node alive", node, ok, err)
	}
	if c.SessionID() != id {
		t.Fatalf("session %#x replaced by %#x", id, c.SessionID())
	}
}

func reconnecting(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer)
}

// TestExpireSessionUnreachable fails, bounded by its context, when no
// server answers.
func TestExpireSessionUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := zkwire.ExpireSession(ctx, "127.0.0.1:1", 0x1234, make([]byte, 16))
	if err == nil || errors.Is(err, zkwire.ErrUnknownSession) {
		t.Fatalf("ExpireSession on a closed port = %v, want a dial error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

// connectBody is a connect response body as a server sends it, with the
// read-only flag.
func connectBody(id int64, passwd []byte) []byte {
	var body bytes.Buffer
	for _, v := range []any{int32(0), int32(4000), id, int32(len(passwd))} {
		_ = binary.Write(&body, binary.BigEndian, v)
	}
	body.Write(passwd)
	body.WriteByte(0)
	return body.Bytes()
}

func TestParseConnectResponse(t *testing.T) {
	passwd := []byte("0123456789abcdef")
	body := connectBody(0x1234, passwd)
	got, err := zkwire.ParseConnectResponse(body)
	if err != nil || got.SessionID != 0x1234 || got.Timeout != 4*time.Second || !bytes.Equal(got.Passwd, passwd) {
		t.Fatalf("ParseConnectResponse = %+v, %v", got, err)
	}
	if _, err := zkwire.ParseConnectResponse(body[:10]); err == nil {
		t.Fatal("short response parsed")
	}
	bad := bytes.Clone(body)
	binary.BigEndian.PutUint32(bad[16:20], 1000) // longer than what follows
	if _, err := zkwire.ParseConnectResponse(bad); err == nil {
		t.Fatal("password length past the end parsed")
	}
	binary.BigEndian.PutUint32(bad[16:20], 0xffffffff) // negative
	if _, err := zkwire.ParseConnectResponse(bad); err == nil {
		t.Fatal("negative password length parsed")
	}
}

// inspector is a plain client for looking at what the sessions left.
func inspector(t *testing.T, servers []string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(servers, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// capture keeps the first connect response read on the connections it dials.
type capture struct {
	mu   sync.Mutex
	resp *zkwire.ConnectResponse
}

func (c *capture) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &capturingConn{Conn: conn, c: c}, nil
}

func (c *capture) get() (zkwire.ConnectResponse, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resp == nil {
		return zkwire.ConnectResponse{}, false
	}
	return *c.resp, true
}

// capturingConn keeps the connect response it reads.
type capturingConn struct {
	net.Conn
	c  *capture
	in zkwire.Frames
}

func (cc *capturingConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	for q := p[:n]; len(q) > 0; {
		var fr zkwire.Frame
		var ok bool
		if q, fr, ok = cc.in.Next(q); !ok || fr.Index != 0 {
			continue
		}
		if resp, perr := zkwire.ParseConnectResponse(fr.Start); perr == nil {
			cc.c.mu.Lock()
			cc.c.resp = &resp
			cc.c.mu.Unlock()
		}
	}
	return n, err
}

// TestFrames finds every frame's start, the first frame whole, however the
// stream is cut: one byte at a time, in one piece, and in reads that end
// mid-length, mid-xid and mid-body.
func TestFrames(t *testing.T) {
	passwd := []byte("0123456789abcdef")
	body := connectBody(0x1234, passwd)
	stream := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	stream = append(stream, body...)
	xids := []int32{-2, 7, -1, 8}
	for i, xid := range xids {
		frame := binary.BigEndian.AppendUint32(nil, uint32(xid))
		frame = append(frame, bytes.Repeat([]byte{byte(i)}, 12*i)...) // the last is 36 bytes of body
		stream = binary.BigEndian.AppendUint32(stream, uint32(len(frame)))
		stream = append(stream, frame...)
	}
	stream = binary.BigEndian.AppendUint32(stream, 0) // an empty frame
	stream = append(stream, 0, 0)                     // and the next one's first bytes

	type seen struct {
		index, size int
		xid         int32
	}
	for _, cut := range []int{1, 3, 5, 7, len(stream)} {
		var f zkwire.Frames
		var got []seen
		for off := 0; off < len(stream); off += cut {
			p := stream[off:min(off+cut, len(stream))]
			for len(p) > 0 {
				var fr zkwire.Frame
				var ok bool
				p, fr, ok = f.Next(p)
				if !ok {
					continue
				}
				if fr.Index == 0 {
					info, err := zkwire.ParseConnectResponse(fr.Start)
					if err != nil || info.SessionID != 0x1234 || !bytes.Equal(info.Passwd, passwd) {
						t.Fatalf("cut %d: first frame %+v, %v", cut, info, err)
					}
					if _, ok := fr.Xid(); ok {
						t.Fatalf("cut %d: the first frame has an xid", cut)
					}
				}
				xid, _ := fr.Xid()
				got = append(got, seen{fr.Index, fr.Size, xid})
			}
		}
		want := []seen{{0, len(body), 0}, {1, 4, -2}, {2, 16, 7}, {3, 28, -1}, {4, 40, 8}, {5, 0, 0}}
		if !slices.Equal(got, want) {
			t.Fatalf("cut %d: frames %v, want %v", cut, got, want)
		}
	}
}

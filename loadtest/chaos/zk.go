package chaos

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
)

// zkSession is the body of GET /debug/zk-session, which an instance serves
// only with --chaos and --lock=zookeeper.
type zkSession struct {
	SessionID    int64  `json:"session_id"`
	SessionIDHex string `json:"session_id_hex"`
	PasswordHex  string `json:"password_hex"`
}

// zkSessionOf asks an instance for the credentials of its ZooKeeper session.
func zkSessionOf(ctx context.Context, c *client.Client, base string) (int64, []byte, error) {
	var s zkSession
	if err := c.GetJSON(ctx, base+"/debug/zk-session", &s); err != nil {
		return 0, nil, fmt.Errorf("zk session of %s: %w", base, err)
	}
	pw, err := hex.DecodeString(s.PasswordHex)
	if err != nil || s.SessionID == 0 {
		return 0, nil, fmt.Errorf("zk session of %s: bad answer %+v", base, s)
	}
	return s.SessionID, pw, nil
}

// ZooKeeper wire constants used to take a session over and close it.
const (
	zkOpCloseSession = -11
	zkConnectTimeout = 4000 // ms asked for; irrelevant, the session is closed at once
)

// expireZKSession ends a session from outside, as a partition longer than
// the session timeout would: a second client presents the session's id and
// password, which moves the session to it (the server drops the owner's
// connection), then closes it. The ensemble deletes the session's
// ephemeral nodes, the locks, at once; the owner learns on reconnecting
// that its session expired.
func expireZKSession(ctx context.Context, addr string, id int64, passwd []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("expire zk session %#x: %w", id, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var req bytes.Buffer
	// protocol version, last zxid seen, timeout, session id, password
	for _, v := range []any{int32(0), int64(0), int32(zkConnectTimeout), id, int32(len(passwd))} {
		_ = binary.Write(&req, binary.BigEndian, v)
	}
	req.Write(passwd)
	if err := writeZKFrame(conn, req.Bytes()); err != nil {
		return fmt.Errorf("expire zk session %#x: connect: %w", id, err)
	}
	resp, err := readZKFrame(conn)
	if err != nil {
		return fmt.Errorf("expire zk session %#x: connect answer: %w", id, err)
	}
	// protocol version (4), timeout (4), session id (8), ...
	if len(resp) < 16 {
		return fmt.Errorf("expire zk session %#x: short connect answer", id)
	}
	if got := int64(binary.BigEndian.Uint64(resp[8:16])); got != id {
		// The server answers session 0 for a session it no longer knows.
		return fmt.Errorf("expire zk session %#x: not taken over (server answered session %#x)", id, got)
	}
	var closeReq bytes.Buffer
	_ = binary.Write(&closeReq, binary.BigEndian, []int32{1, zkOpCloseSession}) // xid, op
	if err := writeZKFrame(conn, closeReq.Bytes()); err != nil {
		return fmt.Errorf("expire zk session %#x: close: %w", id, err)
	}
	if _, err := readZKFrame(conn); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("expire zk session %#x: close answer: %w", id, err)
	}
	return nil
}

func writeZKFrame(w io.Writer, body []byte) error {
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	_, err := w.Write(append(frame, body...))
	return err
}

// maxZKFrame bounds what readZKFrame accepts; the answers read here are
// tens of bytes.
const maxZKFrame = 1 << 16

func readZKFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxZKFrame {
		return nil, fmt.Errorf("zk frame of %d bytes", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return body, nil
}

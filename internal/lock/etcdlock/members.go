package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// caller is what one call of an attempt goes through: the Locker's balanced
// client, or a member's own connection (see members).
type caller interface {
	clientv3.KV
	KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)
}

// members holds a connection of its own to each endpoint, for the retry of
// a call no member answered in time. The balanced client places calls round
// robin with one counter for every call of the client, so a retry, or each
// of two calls made together, lands on the member that held the attempt
// whenever the Locker's other calls took the wrong number of turns in
// between: measured beside other callers, 6-22 % of pairs of calls made
// together went to one member. Two calls through two of these connections
// reach two members, whatever else the Locker does: with one member frozen,
// one of them answers.
type members struct {
	cli  *clientv3.Client
	eps  []string
	turn atomic.Uint64 // which pair goes next

	mu     sync.Mutex
	conns  []*member // by endpoint, each dialled on first use
	closed bool
}

// member is one endpoint's connection.
type member struct {
	clientv3.KV
	clientv3.Lease
	conn *grpc.ClientConn
}

func newMembers(cli *clientv3.Client, eps []string) *members {
	return &members{cli: cli, eps: slices.Clone(eps), conns: make([]*member, len(eps))}
}

// pair returns callers on two distinct members, taking the pairs in turn so
// that successive retries move on, or the balanced client alone with fewer
// than two endpoints or once the Locker is closing.
func (m *members) pair() []caller {
	n := uint64(len(m.eps))
	if n < 2 {
		return []caller{m.cli}
	}
	i := m.turn.Add(1)
	a, err := m.get(int(i % n))
	if err != nil {
		return []caller{m.cli}
	}
	b, err := m.get(int((i + 1) % n))
	if err != nil {
		return []caller{m.cli}
	}
	return []caller{a, b}
}

var errMembersClosed = errors.New("member connections closed")

// get returns endpoint i's connection, dialling it if need be: the dial
// does not wait for the connection (grpc connects in the background), so it
// holds the lock no longer than setting it up.
func (m *members) get(i int) (*member, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errMembersClosed
	}
	if c := m.conns[i]; c != nil {
		return c, nil
	}
	conn, err := m.cli.Dial(m.eps[i])
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", m.eps[i], err)
	}
	c := &member{
		KV:    clientv3.NewKVFromKVClient(pb.NewKVClient(conn), m.cli),
		Lease: clientv3.NewLeaseFromLeaseClient(pb.NewLeaseClient(conn), m.cli, 0),
		conn:  conn,
	}
	m.conns[i] = c
	return c, nil
}

// close closes every connection dialled; pair hands out none after it.
func (m *members) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	var errs []error
	for _, c := range m.conns {
		if c == nil {
			continue
		}
		_ = c.Lease.Close()
		if err := c.conn.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

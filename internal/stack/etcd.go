package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// etcd roles reported by EtcdRole once a member serves requests.
const (
	EtcdLeader   = "leader"
	EtcdFollower = "follower"
)

// ErrEtcdNoLeader means the member answered but knows no leader (an election
// is running, or it has no quorum), so it cannot serve a linearizable request.
var ErrEtcdNoLeader = errors.New("no leader")

// etcdHTTP is a client for etcd's HTTP endpoints (/health and the gRPC
// gateway). Keep-alives are off: a probe must not reuse a connection to a
// member that has since been frozen or killed.
var etcdHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// EtcdRole asks the etcd member at addr (host:port of its client URL)
// whether it leads or follows. It fails, wrapping ErrEtcdNoLeader, while the
// member is unhealthy or knows no leader. It speaks plain HTTP to /health and
// the gateway's /v3/maintenance/status, so probing needs no etcd client.
func EtcdRole(ctx context.Context, addr string) (string, error) {
	return etcdRole(ctx, etcdHTTP, addr)
}

// EtcdRoleDial is EtcdRole over connections opened by dial, e.g. from
// inside a network namespace.
func EtcdRoleDial(ctx context.Context, dial DialFunc, addr string) (string, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: dial}}
	defer c.CloseIdleConnections()
	return etcdRole(ctx, c, addr)
}

func etcdRole(ctx context.Context, c *http.Client, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var health struct {
		Health string `json:"health"`
	}
	if err := etcdCall(ctx, c, addr, http.MethodGet, "/health", &health); err != nil {
		return "", err
	}
	if health.Health != "true" {
		return "", fmt.Errorf("etcd %s: unhealthy: %w", addr, ErrEtcdNoLeader)
	}
	// uint64s travel as JSON strings through the gateway.
	var status struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
		Leader string `json:"leader"`
	}
	if err := etcdCall(ctx, c, addr, http.MethodPost, "/v3/maintenance/status", &status); err != nil {
		return "", err
	}
	switch {
	case status.Leader == "" || status.Leader == "0":
		return "", fmt.Errorf("etcd %s: %w", addr, ErrEtcdNoLeader)
	case status.Leader == status.Header.MemberID:
		return EtcdLeader, nil
	default:
		return EtcdFollower, nil
	}
}

func etcdCall(ctx context.Context, c *http.Client, addr, method, path string, out any) error {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, body)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", addr, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("etcd %s: read %s: %w", addr, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		// /health answers 503 without a leader.
		return fmt.Errorf("etcd %s: %s answered %s %s: %w", addr, path, resp.Status, strings.TrimSpace(string(data)), ErrEtcdNoLeader)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("etcd %s: decode %s: %w", addr, path, err)
	}
	return nil
}

// EtcdCluster is an etcd cluster of child processes owned by the caller,
// loopback only, killed when the test binary dies.
type EtcdCluster struct {
	members []*EtcdMember
}

// EtcdMember is one member of an EtcdCluster: Kill, Stop, Cont and Restart
// act on its process. While it is killed or frozen the others go on serving
// if they keep a quorum, electing a new leader if it led; restarted, it
// keeps its data and membership. Its methods are safe for concurrent use.
type EtcdMember struct {
	server
	bin        string
	dir        string
	name       string
	clientPort int
	args       []string
}

// StartEtcdCluster starts n etcd members (n = 1 is a single-member cluster)
// with their data and logs under dir, and returns once every member reports
// a leader. ctx bounds only the start-up (at most 30 s). The settings match
// scripts/stack.sh: heartbeats every 50 ms, elections after 500 ms.
func StartEtcdCluster(ctx context.Context, dir string, n int) (*EtcdCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("stack: an etcd cluster needs at least one member, got %d", n)
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("stack: etcd not found (%w); run scripts/stack.sh up to install it", err)
	}
	ports, err := freePorts(2 * n) // client and peer port per member
	if err != nil {
		return nil, err
	}
	peers := make([]string, n)
	for i := range n {
		peers[i] = fmt.Sprintf("etcd%d=http://127.0.0.1:%d", i+1, ports[2*i+1])
	}
	c := &EtcdCluster{}
	for i := range n {
		m := &EtcdMember{bin: bin, dir: filepath.Join(dir, "etcd"+strconv.Itoa(i+1)), name: "etcd" + strconv.Itoa(i+1), clientPort: ports[2*i]}
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return nil, fmt.Errorf("stack: etcd dir: %w", err)
		}
		client := "http://" + m.Addr()
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		m.args = []string{
			"--name", m.name, "--data-dir", filepath.Join(m.dir, "data"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			// Ignored once the data dir exists, so Restart rejoins the cluster.
			"--initial-cluster", strings.Join(peers, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "stockguard-test",
			"--heartbeat-interval", "50", "--election-timeout", "500",
			"--logger", "zap", "--log-outputs", "stderr",
		}
		m.server = server{name: m.what, boot: func() (*process, error) { return startProcess(m.bin, m.args, m.logPath()) },
			ready: func(*process) probeFunc { return m.serving }}
		c.members = append(c.members, m)
	}
	if err := startAll(ctx, serversOf(c.members)); err != nil {
		return nil, err
	}
	return c, nil
}

// Endpoints returns the members' client addresses (127.0.0.1:port) in
// member order, as an etcd client takes them.
func (c *EtcdCluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.Addr()
	}
	return out
}

// Member returns the i-th member (0-based, the order of Endpoints); it
// panics if i is out of range.
func (c *EtcdCluster) Member(i int) *EtcdMember {
	return c.members[i]
}

// Leader asks every member once and returns the index of the one that
// leads. It fails if none does right now, e.g. during an election; use
// WaitLeader to wait for one.
func (c *EtcdCluster) Leader(ctx context.Context) (int, error) {
	return leaderOf(ctx, "etcd member", len(c.members), func(ctx context.Context, i int) (bool, error) {
		role, err := c.members[i].Role(ctx)
		return role == EtcdLeader, err
	})
}

// WaitLeader polls Leader until a member leads or ctx ends, e.g. to time an
// election after the old leader was killed.
func (c *EtcdCluster) WaitLeader(ctx context.Context) (int, error) {
	return waitLeader(ctx, c.Leader)
}

// Close kills every member; it is safe to call more than once.
func (c *EtcdCluster) Close() error {
	return killAll(serversOf(c.members))
}

// Addr returns the member's client address, 127.0.0.1:port.
func (m *EtcdMember) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.clientPort))
}

// Role returns the member's current role (leader or follower); see EtcdRole.
func (m *EtcdMember) Role(ctx context.Context) (string, error) {
	return EtcdRole(ctx, m.Addr())
}

func (m *EtcdMember) logPath() string { return filepath.Join(m.dir, "etcd.log") }

func (m *EtcdMember) what() string { return fmt.Sprintf("etcd member %s (%s)", m.name, m.Addr()) }

func (m *EtcdMember) serving(ctx context.Context) error {
	_, err := m.Role(ctx)
	return err
}

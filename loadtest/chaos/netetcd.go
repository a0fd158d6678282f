package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/netns"
)

// Ports of an etcd member inside its namespace.
const (
	etcdClientPort = 2379
	etcdPeerPort   = 2380
)

// startEtcd starts a three-member etcd cluster, one member per lock
// member, with the settings of stack.StartEtcdCluster (heartbeats every
// 50 ms, elections after 500 ms) and its data under dir, and returns once
// every member reports a leader.
func (r *netRig) startEtcd(ctx context.Context, dir string) error {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return fmt.Errorf("etcd not found (%w); run scripts/stack.sh up to install it", err)
	}
	peers := make([]string, len(r.locks))
	for i, m := range r.locks {
		peers[i] = m + "=http://" + r.addr(m, etcdPeerPort)
	}
	nodes := make([]*netns.Process, len(r.locks))
	// Boot every member before waiting: none has a leader until a quorum runs.
	for i, m := range r.locks {
		d := filepath.Join(dir, m)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		client, peer := "http://"+r.addr(m, etcdClientPort), "http://"+r.addr(m, etcdPeerPort)
		cmd := exec.Command(bin, "--name", m, "--data-dir", filepath.Join(d, "data"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(peers, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "stockguard-chaos",
			"--heartbeat-interval", "50", "--election-timeout", "500",
			"--logger", "zap", "--log-outputs", "stderr")
		if nodes[i], err = r.startLogged(m, cmd, filepath.Join(d, "etcd.log")); err != nil {
			return err
		}
	}
	for i, m := range r.locks {
		addr := r.addr(m, etcdClientPort)
		if err := waitUp(ctx, "etcd "+addr, nodes[i], filepath.Join(dir, m, "etcd.log"), serverStartLimit,
			func(ctx context.Context) error {
				_, err := stack.EtcdRoleDial(ctx, r.dial, addr)
				return err
			}); err != nil {
			return err
		}
	}
	return nil
}

package seedtable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/procs"
)

// server is one lock server of a rig that can be killed.
type server interface {
	Kill() error
	Addr() string
}

// rig is a backend's own lock servers (never the shared stack's: they are
// killed) and service instances with a short lease, --chaos and a short
// --lock-wait, on the backend's database.
type rig struct {
	backend string
	redis   []*stack.Redis
	zk      *stack.ZKEnsemble
	etcd    *stack.EtcdCluster
	ins     []*procs.Instance
	alive   []bool
	client  *client.Client
}

// startRig starts the lock servers backend needs under dir and n instances
// pointed at them.
func startRig(ctx context.Context, fc FaultConfig, n int) (*rig, error) {
	if err := os.MkdirAll(fc.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("rig: %w", err)
	}
	r := &rig{backend: fc.Backend, client: client.New(16, fc.AdminToken, fc.RequestTimeout)}
	opts := procs.ServeOptions{
		Bin: fc.Bin, Lock: fc.Backend, Fencing: "on", LockTTL: fc.LockTTL.String(), AdminToken: fc.AdminToken,
		DatabaseURL: fc.DatabaseURL, LogDir: fc.Dir,
		// The reaper is kept out: the holds the rig makes outlast it.
		Extra: []string{"--chaos", "--lock-wait=" + fc.LockWait.String(), "--reap-interval=1h"},
	}
	if !fc.fenced() {
		opts.Fencing = "off"
	}
	var err error
	switch fc.Backend {
	case "redis", "redlock":
		k := 1
		if fc.Backend == "redlock" {
			k = 5
		}
		var addrs []string
		for i := range k {
			dir := filepath.Join(fc.Dir, fmt.Sprintf("redis%d", i+1))
			if err = os.MkdirAll(dir, 0o755); err != nil {
				break
			}
			var s *stack.Redis
			if s, err = stack.StartRedis(ctx, dir); err != nil {
				break
			}
			r.redis = append(r.redis, s)
			addrs = append(addrs, s.Addr())
		}
		opts.RedisAddrs = strings.Join(addrs, ",")
	case "zookeeper":
		if r.zk, err = stack.StartZKEnsemble(ctx, filepath.Join(fc.Dir, "zk"), 3); err == nil {
			opts.ZKServers = strings.Join(r.zk.Servers(), ",")
		}
	case "etcd":
		if r.etcd, err = stack.StartEtcdCluster(ctx, filepath.Join(fc.Dir, "etcd"), 3); err == nil {
			opts.EtcdEndpoints = strings.Join(r.etcd.Endpoints(), ",")
		}
	}
	if err != nil {
		r.close()
		return nil, fmt.Errorf("own lock servers: %w", err)
	}
	if r.ins, err = procs.Start(ctx, opts, n, fc.StartupTimeout); err != nil {
		r.close()
		return nil, err
	}
	r.alive = make([]bool, n)
	for i := range r.alive {
		r.alive[i] = true
	}
	return r, nil
}

// servers lists the rig's lock servers in the order availability kills
// them: for an ensemble or cluster, followers before the leader, so that
// the minority cell measures a lost member, not an election.
func (r *rig) servers(ctx context.Context) ([]server, error) {
	var out []server
	switch {
	case r.zk != nil:
		leader, err := r.zk.WaitLeader(ctx)
		if err != nil {
			return nil, err
		}
		for _, i := range []int{(leader + 1) % 3, (leader + 2) % 3, leader} {
			out = append(out, r.zk.Node(i))
		}
	case r.etcd != nil:
		leader, err := r.etcd.WaitLeader(ctx)
		if err != nil {
			return nil, err
		}
		for _, i := range []int{(leader + 1) % 3, (leader + 2) % 3, leader} {
			out = append(out, r.etcd.Member(i))
		}
	default:
		for _, s := range r.redis {
			out = append(out, s)
		}
	}
	return out, nil
}

// urls are the instances still alive.
func (r *rig) urls() []string {
	var out []string
	for i, in := range r.ins {
		if r.alive[i] {
			out = append(out, in.URL)
		}
	}
	return out
}

// pausesLogged counts the X-Chaos-Pause stalls instance i has begun.
func (r *rig) pausesLogged(i int) int {
	b, err := os.ReadFile(r.ins[i].LogPath)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(pauseMarker))
}

// pauseMarker is what an instance logs when an order starts its
// X-Chaos-Pause stall inside the critical section, leases held.
const pauseMarker = "chaos: pausing"

// waitPausing waits until instance i has logged more stalls than before.
func (r *rig) waitPausing(ctx context.Context, i, before int, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for r.pausesLogged(i) <= before {
		select {
		case <-ctx.Done():
			return fmt.Errorf("instance %d never began its stall within %v", i+1, limit)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// close stops the instances still alive, then the servers.
func (r *rig) close() error {
	var alive []*procs.Instance
	for i, in := range r.ins {
		if r.alive[i] {
			alive = append(alive, in)
		} else {
			_ = in.Stop() // already dead: this only closes its log
		}
	}
	errs := []error{procs.StopAll(alive)}
	for _, s := range r.redis {
		errs = append(errs, s.Close())
	}
	if r.zk != nil {
		errs = append(errs, r.zk.Close())
	}
	if r.etcd != nil {
		errs = append(errs, r.etcd.Close())
	}
	r.client.Close()
	return errors.Join(errs...)
}

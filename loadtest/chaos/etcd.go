package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/loadtest/run"
)

// etcdScenarios are the faults of the run's own three-member etcd cluster:
// a follower killed and restarted, and the leader killed, which costs an
// election (heartbeats every 50 ms, elections after 500 ms, as in
// scripts/stack.sh). Sessions and their leases live on the cluster, not on
// a member, so the instances' leases survive both while a quorum remains.
var etcdScenarios = []*scenario{
	{
		Name: "kill-etcd-member", Backends: []string{"etcd"},
		Summary: "SIGKILL an etcd follower and restart it: two of three members keep the quorum, so orders keep succeeding throughout.",
		fault:   killEtcdMember,
		check: func(r *Run) []string {
			out := needRecovery(r)
			if r.Fault.ReservedDuring == 0 {
				out = append(out, "no order succeeded while the follower was down")
			}
			return out
		},
	},
	{
		Name: "kill-etcd-leader", Backends: []string{"etcd"},
		Summary: "SIGKILL the etcd leader: the other two elect a new one, sessions keep their leases, and locks work again after the election.",
		fault:   killEtcdLeader,
		check:   needRecovery,
	},
}

// startEtcd starts the run's own three-member cluster and points the
// instances at it.
func (e *chaosEnv) startEtcd(ctx context.Context) error {
	c, err := stack.StartEtcdCluster(ctx, filepath.Join(e.dir, "etcd"), 3)
	if err != nil {
		return err
	}
	e.etcd = c
	e.opts.EtcdEndpoints = strings.Join(c.Endpoints(), ",")
	return nil
}

// etcdFaultDown is how long a killed follower stays down: several session
// keepalives (a third of the 1 s lease at the shortest) go to the others.
const etcdFaultDown = 1500 * time.Millisecond

// etcdLeader waits, at most leaderWait, for the cluster to have a leader.
func (e *chaosEnv) etcdLeader(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	i, err := e.etcd.WaitLeader(ctx)
	if err != nil {
		return -1, fmt.Errorf("no etcd leader within %v: %w", leaderWait, err)
	}
	return i, nil
}

func killEtcdMember(ctx context.Context, e *chaosEnv) error {
	leader, err := e.etcdLeader(ctx)
	if err != nil {
		return err
	}
	f := (leader + 1) % 3
	m := e.etcd.Member(f)
	from := e.event(EventFault, "SIGKILL etcd follower %d (%s, pid %d) for %v", f+1, m.Addr(), m.PID(), etcdFaultDown)
	if err := m.Kill(); err != nil {
		return err
	}
	run.Sleep(ctx, etcdFaultDown)
	if err := m.Restart(ctx); err != nil {
		return fmt.Errorf("restart etcd member %d: %w", f+1, err)
	}
	e.heal(nil, "follower %d restarted and back in the cluster", f+1)
	e.window(from, e.healAt)
	return nil
}

func killEtcdLeader(ctx context.Context, e *chaosEnv) error {
	leader, err := e.etcdLeader(ctx)
	if err != nil {
		return err
	}
	old := e.etcd.Member(leader)
	from := e.event(EventFault, "SIGKILL etcd leader %d (%s, pid %d)", leader+1, old.Addr(), old.PID())
	if err := old.Kill(); err != nil {
		return err
	}
	// The dead leader still counts in its own answer until it is gone, so
	// wait for a leader among the others.
	wctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	next, err := e.waitOtherEtcdLeader(wctx, leader)
	if err != nil {
		return err
	}
	e.heal(nil, "member %d elected leader: the cluster serves writes again; restarting the old leader", next+1)
	e.window(from, e.healAt)
	e.background(func() {
		if err := old.Restart(ctx); err != nil {
			e.event(EventNote, "old leader %d did not come back: %v", leader+1, err)
			return
		}
		e.event(EventHeal, "old leader %d restarted, back as a follower", leader+1)
	})
	return nil
}

// waitOtherEtcdLeader polls the members other than skip until one leads.
func (e *chaosEnv) waitOtherEtcdLeader(ctx context.Context, skip int) (int, error) {
	for {
		for i := range 3 {
			if i == skip {
				continue
			}
			if role, err := e.etcd.Member(i).Role(ctx); err == nil && role == stack.EtcdLeader {
				return i, nil
			}
		}
		if ctx.Err() != nil {
			return -1, fmt.Errorf("no etcd leader elected after the leader was killed: %w", ctx.Err())
		}
		run.Sleep(ctx, 20*time.Millisecond)
	}
}

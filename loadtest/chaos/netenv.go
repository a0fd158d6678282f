package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/netns"

	"github.com/stockguard/stockguard/loadtest/client"
	"github.com/stockguard/stockguard/loadtest/procs"
	"github.com/stockguard/stockguard/loadtest/run"
)

// netPrefix starts the name of every network namespace a chaos run
// creates; a run first sweeps the ones a crashed run left behind.
const netPrefix = "sgchaos-"

// Member names of a partition scenario's topology, besides the lock
// servers' (redisN, zkN) and the instances' (instN).
const (
	memberClient   = "client" // the load tester's sockets: load, admin calls, probes
	memberPostgres = "pg"
)

// Ports inside the members: every server has an address of its own, so
// each listens on its usual port.
const (
	instancePort = 8080
	redisPort    = 6379
	zkClientPort = 2181
	zkQuorum     = 2888
	zkElection   = 3888
)

// netDialTimeout bounds one connection attempt from a member; a reachable
// member answers in well under a millisecond, a cut one never.
const netDialTimeout = 5 * time.Second

// netRig is the world of a partition scenario, built from network
// namespaces only (internal/stack/netns): one member per service instance,
// per lock server, for Postgres and for the load tester's sockets, so that
// any link between them can be cut with nftables rules inside the
// namespaces, and the host's own interfaces, routes and firewall are never
// touched. close removes all of it.
type netRig struct {
	topo *netns.Topology
	// locks are the lock servers' members in order (redis1..5, zk1..3,
	// etcd1..3), lockProcs their processes (redis and zookeeper).
	locks     []string
	lockProcs []*netns.Process
	backend   string
	dir       string // the run's log directory
	pg        *postgresServer
	ins       []*netInstance
}

// netInstance is one `stockguard serve` running inside its own member.
type netInstance struct {
	member  string
	proc    *netns.Process
	url     string
	logPath string
}

func instanceMember(i int) string { return "inst" + strconv.Itoa(i+1) }

// addr is member name's address with port, as the servers are told to
// listen and the clients to dial.
func (r *netRig) addr(name string, port int) string {
	return net.JoinHostPort(r.topo.Member(name).Addr().String(), strconv.Itoa(port))
}

// dial opens connections from the load tester's member.
func (r *netRig) dial(ctx context.Context, network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, netDialTimeout)
	defer cancel()
	return r.topo.Member(memberClient).DialContext(ctx, network, address)
}

// others lists every member except those named.
func (r *netRig) others(except ...string) []string {
	var out []string
	for _, m := range r.topo.Members() {
		if !slices.Contains(except, m.Name()) {
			out = append(out, m.Name())
		}
	}
	return out
}

// startNet builds the topology for e's backend, starts Postgres, the lock
// servers and the instances inside it, points e's clients at the
// instances through the load tester's member, and creates the run's SKUs.
// On failure the caller still closes the rig it got.
func startNet(ctx context.Context, e *chaosEnv, runID string) (*netRig, error) {
	if removed, err := netns.Sweep(ctx, netPrefix); err != nil {
		e.event(EventNote, "sweeping namespaces of earlier runs: %v", err)
	} else if len(removed) > 0 {
		e.event(EventNote, "removed %d namespaces and scratch directories a crashed run left behind", len(removed))
	}
	r := &netRig{backend: e.plan.backend, dir: e.dir}
	switch e.plan.backend {
	case "redis":
		r.locks = []string{"redis1"}
	case "redlock":
		r.locks = []string{"redis1", "redis2", "redis3", "redis4", "redis5"}
	case "zookeeper":
		r.locks = []string{"zk1", "zk2", "zk3"}
	case "etcd":
		r.locks = []string{"etcd1", "etcd2", "etcd3"}
	default:
		return nil, fmt.Errorf("partition scenarios: backend %q has no lock servers to cut off", e.plan.backend)
	}
	r.lockProcs = make([]*netns.Process, len(r.locks))
	members := append([]string{memberClient, memberPostgres}, r.locks...)
	for i := range e.cc.Instances {
		members = append(members, instanceMember(i))
	}
	topo, err := netns.New(ctx, members, netns.WithPrefix(netPrefix))
	if err != nil {
		return nil, err
	}
	r.topo = topo
	if r.pg, err = startPostgres(ctx, r, memberPostgres, e.dir); err != nil {
		return r, err
	}
	e.opts.DatabaseURL = r.pg.url
	switch e.plan.backend {
	case "zookeeper":
		if err := r.startZK(ctx); err != nil {
			return r, err
		}
		e.opts.ZKServers = strings.Join(r.lockAddrs(zkClientPort), ",")
	case "etcd":
		if err := r.startEtcd(ctx, e.dir); err != nil {
			return r, err
		}
		e.opts.EtcdEndpoints = strings.Join(r.lockAddrs(etcdClientPort), ",")
	default:
		if err := r.startRedis(ctx); err != nil {
			return r, err
		}
		e.opts.RedisAddrs = strings.Join(r.lockAddrs(redisPort), ",")
	}
	if err := r.startInstances(ctx, e); err != nil {
		return r, err
	}
	for _, in := range r.ins {
		e.ins = append(e.ins, in)
	}
	urls := e.urls()
	skus := make([]string, e.cc.SKUs)
	for i := range skus {
		skus[i] = run.SKUName(runID, i)
	}
	e.client.Close()
	e.client = r.httpClient(8, e.opts.AdminToken, 10*time.Second, nil)
	e.load = newChaosLoad(urls, skus, runID, e.cc.Concurrency, e.cc.RequestTimeout)
	e.load.client.Close()
	e.load.client = r.httpClient(e.cc.Concurrency+8, "", e.cc.RequestTimeout,
		func(rt http.RoundTripper) http.RoundTripper { return chaosTransport{base: rt} })
	return r, run.ForEach(ctx, len(skus), 4, func(ctx context.Context, i int) error {
		_, err := e.client.PutSKU(ctx, urls[i%len(urls)], skus[i], e.cc.Stock)
		return err
	})
}

// httpClient is a load tester client whose connections are opened from
// the load tester's member; wrap, when set, wraps its transport.
func (r *netRig) httpClient(idle int, adminToken string, timeout time.Duration, wrap func(http.RoundTripper) http.RoundTripper) *client.Client {
	c := client.New(idle, adminToken, timeout)
	c.WrapTransport(func(http.RoundTripper) http.RoundTripper {
		var rt http.RoundTripper = &http.Transport{
			Proxy:                 nil,
			DialContext:           r.dial,
			MaxIdleConnsPerHost:   idle,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: timeout,
			DisableCompression:    true,
		}
		if wrap != nil {
			rt = wrap(rt)
		}
		return rt
	})
	return c
}

func (r *netRig) lockAddrs(port int) []string {
	out := make([]string, len(r.locks))
	for i, m := range r.locks {
		out[i] = r.addr(m, port)
	}
	return out
}

// startLogged starts cmd inside member with its output in logPath.
func (r *netRig) startLogged(member string, cmd *exec.Cmd, logPath string) (*netns.Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", member, err)
	}
	// The child has its own copy of the descriptor once started.
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	return r.topo.Start(member, cmd)
}

// waitUp polls check until it succeeds, the process exits or limit
// passes; the error quotes the end of the log.
func waitUp(ctx context.Context, what string, p *netns.Process, logPath string, limit time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited during start-up (%v): %w\n%s", what, p.Err(), err, procs.Tail(logPath, 10))
		case <-ctx.Done():
			return fmt.Errorf("%s not up within %v: %w\n%s", what, limit, err, procs.Tail(logPath, 10))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// serverStartLimit bounds the start of one server: a JVM or initdb on a
// busy two-core machine takes seconds.
const serverStartLimit = 60 * time.Second

func (r *netRig) startRedis(ctx context.Context) error {
	for i := range r.locks {
		if err := r.startRedisNode(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// startRedisNode starts lock server i, a redis-server without persistence,
// and waits until it answers.
func (r *netRig) startRedisNode(ctx context.Context, i int) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not found (%w); run scripts/stack.sh up to install it", err)
	}
	m := r.locks[i]
	d := filepath.Join(r.dir, m)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	addr := r.addr(m, redisPort)
	logPath := filepath.Join(d, "redis.log")
	cmd := exec.Command(bin, "--port", strconv.Itoa(redisPort), "--bind", r.topo.Member(m).Addr().String(),
		"--protected-mode", "no", "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", d, "--logfile", logPath)
	p, err := r.startLogged(m, cmd, logPath)
	if err != nil {
		return err
	}
	r.lockProcs[i] = p
	return waitUp(ctx, "redis-server "+addr, p, logPath, serverStartLimit, func(ctx context.Context) error {
		return r.redisPing(ctx, addr)
	})
}

// redisPing sends PING over a bare connection from the load tester's
// member.
func (r *netRig) redisPing(ctx context.Context, addr string) error {
	conn, err := r.dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 7)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), "+PONG") {
		return fmt.Errorf("redis %s: PING answered %q", addr, buf[:n])
	}
	return nil
}

func (r *netRig) startZK(ctx context.Context) error {
	// Boot every JVM before waiting: none serves until a quorum runs.
	for i := range r.locks {
		if err := r.bootZK(i); err != nil {
			return err
		}
	}
	for i := range r.locks {
		if err := r.waitZK(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// bootZK starts ZooKeeper node i in its member, its data directory kept
// from an earlier start.
func (r *netRig) bootZK(i int) error {
	peers := make([]stack.ZKPeer, len(r.locks))
	for j, m := range r.locks {
		peers[j] = stack.ZKPeer{Host: r.topo.Member(m).Addr().String(), ClientPort: zkClientPort, QuorumPort: zkQuorum, ElectionPort: zkElection}
	}
	m := r.locks[i]
	d := filepath.Join(r.dir, m)
	if err := stack.WriteZKConfig(d, i+1, peers); err != nil {
		return err
	}
	cmd, err := stack.ZKCommand(d)
	if err != nil {
		return err
	}
	r.lockProcs[i], err = r.startLogged(m, cmd, filepath.Join(d, "zookeeper.log"))
	return err
}

// waitZK waits until ZooKeeper node i serves as leader or follower.
func (r *netRig) waitZK(ctx context.Context, i int) error {
	m := r.locks[i]
	addr := r.addr(m, zkClientPort)
	return waitUp(ctx, "zookeeper "+addr, r.lockProcs[i], filepath.Join(r.dir, m, "zookeeper.log"), serverStartLimit,
		func(ctx context.Context) error {
			_, err := stack.ZKModeDial(ctx, r.dial, addr)
			return err
		})
}

// killLock SIGKILLs lock server i; a Redis comes back empty (it keeps
// nothing on disk), a ZooKeeper node with its data.
func (r *netRig) killLock(i int) error { return r.lockProcs[i].Kill() }

// restartLock starts lock server i again after killLock and waits until
// it serves.
func (r *netRig) restartLock(ctx context.Context, i int) error {
	if r.backend != "zookeeper" {
		return r.startRedisNode(ctx, i)
	}
	if err := r.bootZK(i); err != nil {
		return err
	}
	return r.waitZK(ctx, i)
}

// zkLeader asks each ZooKeeper node reachable from the load tester for its
// mode and returns the index of the leader, or -1.
func (r *netRig) zkLeader(ctx context.Context, among []int) int {
	for _, i := range among {
		if mode, err := stack.ZKModeDial(ctx, r.dial, r.addr(r.locks[i], zkClientPort)); err == nil && mode == stack.ZKLeader {
			return i
		}
	}
	return -1
}

// waitZKLeader polls zkLeader until one of among leads or limit passes.
func (r *netRig) waitZKLeader(ctx context.Context, among []int, limit time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		if i := r.zkLeader(ctx, among); i >= 0 {
			return i, nil
		}
		if ctx.Err() != nil {
			return -1, fmt.Errorf("no ZooKeeper leader among nodes %v within %v", among, limit)
		}
		run.Sleep(ctx, 100*time.Millisecond)
	}
}

// startInstances starts one serve process per instance member, the first
// alone so that it applies the migrations before the others race to.
func (r *netRig) startInstances(ctx context.Context, e *chaosEnv) error {
	probe := r.httpClient(2, "", 2*time.Second, nil)
	defer probe.Close()
	for i := range e.cc.Instances {
		m := instanceMember(i)
		addr := r.addr(m, instancePort)
		in := &netInstance{member: m, url: "http://" + addr,
			logPath: filepath.Join(e.dir, fmt.Sprintf("%s-%d.log", e.plan.backend, i))}
		cmd := exec.Command(e.cc.Bin, e.opts.Args(addr)...)
		cmd.Env = e.opts.Environ()
		p, err := r.startLogged(m, cmd, in.logPath)
		if err != nil {
			return err
		}
		in.proc = p
		r.ins = append(r.ins, in)
		if i == 0 || i == e.cc.Instances-1 {
			for _, w := range r.ins[min(i, 1):] {
				if err := waitUp(ctx, "instance "+w.url, w.proc, w.logPath, e.cc.StartupTimeout, func(ctx context.Context) error {
					return probe.Ready(ctx, w.url)
				}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// stopInstances stops the instances (SIGTERM, so they drain and release);
// the servers keep running.
func (r *netRig) stopInstances() []string {
	var notes []string
	for _, in := range r.ins {
		if err := in.stop(); err != nil {
			notes = append(notes, err.Error())
		}
	}
	r.ins = nil
	return notes
}

// close stops the instances still running, then removes the topology,
// which kills every other process in it and removes Postgres's scratch
// directory. Safe after a partial start.
func (r *netRig) close() []string {
	notes := r.stopInstances()
	if r.topo != nil {
		if err := r.topo.Close(); err != nil {
			notes = append(notes, "removing network namespaces: "+err.Error())
		}
	}
	return notes
}

// stop sends SIGTERM and waits for the drain, then SIGKILL.
func (in *netInstance) stop() error {
	select {
	case <-in.proc.Done():
		return fmt.Errorf("instance %s had exited before the end of the run: %v", in.url, in.proc.Err())
	default:
	}
	if err := in.proc.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-in.proc.Done():
		return nil
	case <-time.After(10 * time.Second):
	}
	return errors.Join(fmt.Errorf("instance %s did not stop within 10s of SIGTERM; killed", in.url), in.proc.Kill())
}

package stack_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// mustStart fails (or skips, like the Require helpers) when a private server
// cannot start, e.g. on a machine where scripts/stack.sh never installed it.
func mustStart(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(stacktest.EnvSkipIntegration) == "1" {
		t.Skipf("cannot start server, skipping: %v", err)
	}
	t.Fatal(err)
}

func shortPing(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return stack.PingRedis(ctx, addr)
}

func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
}

func TestRedisKillRestart(t *testing.T) {
	ctx := t.Context()
	r, err := stack.StartRedis(ctx, t.TempDir())
	mustStart(t, err)
	t.Cleanup(func() { _ = r.Close() })

	addr, pid := r.Addr(), r.PID()
	c := newClient(addr)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	_ = c.Close()

	if err := r.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := shortPing(addr); err == nil {
		t.Fatal("a SIGSTOPped redis answered PING")
	}
	if err := r.Cont(); err != nil {
		t.Fatalf("Cont: %v", err)
	}
	if err := shortPing(addr); err != nil {
		t.Fatalf("PING after SIGCONT: %v", err)
	}

	if err := r.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("pid %d still exists after Kill (kill -0: %v)", pid, err)
	}
	if err := shortPing(addr); err == nil {
		t.Fatal("a killed redis answered PING")
	}
	if err := r.Cont(); err == nil {
		t.Fatal("Cont of a killed redis succeeded")
	}

	if err := r.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if r.Addr() != addr || r.PID() == pid || r.PID() == 0 {
		t.Fatalf("after Restart: addr %s pid %d, before: addr %s pid %d", r.Addr(), r.PID(), addr, pid)
	}
	c = newClient(addr)
	defer c.Close()
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after restart = %v, want redis.Nil (empty server)", err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after restart = %d, %v; want 0", n, err)
	}
}

func TestRedisReplicaAndFixedPort(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	master, err := stack.StartRedis(ctx, dir)
	mustStart(t, err)
	t.Cleanup(func() { _ = master.Close() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	replica, err := stack.StartRedis(ctx, dir, stack.RedisPort(port), stack.RedisReplicaOf(master.Addr()))
	mustStart(t, err)
	t.Cleanup(func() { _ = replica.Close() })
	if want := fmt.Sprintf("127.0.0.1:%d", port); replica.Addr() != want {
		t.Fatalf("replica addr %s, want %s", replica.Addr(), want)
	}

	m, rc := newClient(master.Addr()), newClient(replica.Addr())
	defer m.Close()
	defer rc.Close()
	if err := m.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := rc.Get(ctx, "k").Result()
		if err == nil && v == "v" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never saw the master's write: %q, %v", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStartRedisPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := stack.StartRedis(ctx, t.TempDir(), stack.RedisPort(ln.Addr().(*net.TCPAddr).Port))
	if err == nil {
		_ = r.Close()
		t.Fatal("StartRedis on a taken port succeeded")
	}
	if !strings.Contains(err.Error(), "exited during start-up") {
		t.Fatalf("error does not say the server exited: %v", err)
	}
}

func TestZKEnsembleLeaderFailover(t *testing.T) {
	ctx := t.Context()
	e, err := stack.StartZKEnsemble(ctx, t.TempDir(), 3)
	mustStart(t, err)
	t.Cleanup(func() { _ = e.Close() })

	if got := e.Servers(); len(got) != 3 {
		t.Fatalf("Servers() = %v, want 3", got)
	}
	leader, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mode, err := e.Node(i).Mode(ctx)
		want := stack.ZKFollower
		if i == leader {
			want = stack.ZKLeader
		}
		if err != nil || mode != want {
			t.Fatalf("node %d mode %q, %v; want %q", i, mode, err, want)
		}
	}

	old := e.Node(leader)
	oldPID := old.PID()
	if err := old.Kill(); err != nil {
		t.Fatalf("Kill leader: %v", err)
	}
	if err := syscall.Kill(oldPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("leader pid %d still exists after Kill (kill -0: %v)", oldPID, err)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	next, err := e.WaitLeader(wctx)
	if err != nil {
		t.Fatalf("no new leader after killing node %d: %v", leader, err)
	}
	if next == leader {
		t.Fatalf("killed node %d still reported as leader", leader)
	}
	t.Logf("node %d leads %v after node %d was killed", next, time.Since(start).Round(time.Millisecond), leader)

	if err := old.Restart(ctx); err != nil {
		t.Fatalf("Restart old leader: %v", err)
	}
	if old.PID() == oldPID {
		t.Fatal("Restart kept the old pid")
	}
	if mode, err := old.Mode(ctx); err != nil || mode != stack.ZKFollower {
		t.Fatalf("restarted node mode %q, %v; want follower", mode, err)
	}
	if got, err := e.Leader(ctx); err != nil || got != next {
		t.Fatalf("leader after restart %d, %v; want %d", got, err, next)
	}
}

func TestEtcdClusterLeaderFailover(t *testing.T) {
	ctx := t.Context()
	c, err := stack.StartEtcdCluster(ctx, t.TempDir(), 3)
	mustStart(t, err)
	t.Cleanup(func() { _ = c.Close() })

	if got := c.Endpoints(); len(got) != 3 {
		t.Fatalf("Endpoints() = %v, want 3", got)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		role, err := c.Member(i).Role(ctx)
		want := stack.EtcdFollower
		if i == leader {
			want = stack.EtcdLeader
		}
		if err != nil || role != want {
			t.Fatalf("member %d role %q, %v; want %q", i, role, err, want)
		}
	}

	// A frozen follower answers nothing; the others keep their leader.
	follower := c.Member((leader + 1) % 3)
	if err := follower.Stop(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = follower.Role(pctx)
	cancel()
	if err == nil {
		t.Fatal("a SIGSTOPped member answered its status")
	}
	if got, err := c.Leader(ctx); err != nil || got != leader {
		t.Fatalf("leader with a frozen follower %d, %v; want %d", got, err, leader)
	}
	if err := follower.Cont(); err != nil {
		t.Fatal(err)
	}

	old := c.Member(leader)
	oldPID := old.PID()
	if err := old.Kill(); err != nil {
		t.Fatalf("Kill leader: %v", err)
	}
	if err := syscall.Kill(oldPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("leader pid %d still exists after Kill (kill -0: %v)", oldPID, err)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	next, err := c.WaitLeader(wctx)
	if err != nil {
		t.Fatalf("no new leader after killing member %d: %v", leader, err)
	}
	if next == leader {
		t.Fatalf("killed member %d still reported as leader", leader)
	}
	t.Logf("member %d leads %v after member %d was killed", next, time.Since(start).Round(time.Millisecond), leader)

	if err := old.Restart(ctx); err != nil {
		t.Fatalf("Restart old leader: %v", err)
	}
	if old.PID() == oldPID {
		t.Fatal("Restart kept the old pid")
	}
	if role, err := old.Role(ctx); err != nil || role != stack.EtcdFollower {
		t.Fatalf("restarted member role %q, %v; want follower", role, err)
	}
}

func TestNewDatabase(t *testing.T) {
	admin := stacktest.RequirePostgres(t)
	var name string
	t.Run("isolated", func(t *testing.T) {
		dsn := stacktest.NewDatabase(t, t.Context())
		conn, err := pgx.Connect(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		// Left open on purpose: the drop must force it closed.
		if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "sg_test_") {
			t.Fatalf("database %q lacks the sg_test_ prefix", name)
		}
		if _, err := conn.Exec(t.Context(), "CREATE TABLE t (id int); INSERT INTO t VALUES (1)"); err != nil {
			t.Fatal(err)
		}
	})
	conn, err := pgx.Connect(t.Context(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after the test ended", name)
	}
}

func TestRequireSharedStack(t *testing.T) {
	if got := stacktest.RequireRedis(t); len(got) == 0 {
		t.Fatal("RequireRedis returned no address")
	}
	if got := stacktest.RequireZK(t); len(got) == 0 {
		t.Fatal("RequireZK returned no address")
	}
	if got := stacktest.RequireEtcd(t); len(got) == 0 {
		t.Fatal("RequireEtcd returned no address")
	}
	if got := stacktest.RequirePostgres(t); got == "" {
		t.Fatal("RequirePostgres returned no URL")
	}
}

// recordingTB captures Fatalf and Skipf and ends the goroutine like the real
// ones do, so the Require helpers' failure path can be checked.
type recordingTB struct {
	testing.TB
	mu          sync.Mutex
	fatal, skip string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skip = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recordingTB) run(f func(testing.TB)) (fatal, skip string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal, r.skip
}

func TestRequireFailsOrSkipsWhenDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	t.Setenv(stack.EnvRedisAddrs, dead)
	t.Setenv(stack.EnvZKServers, dead)
	t.Setenv(stack.EnvEtcdEndpoints, dead)
	t.Setenv(stack.EnvDatabaseURL, "postgres://postgres@"+dead+"/x?sslmode=disable")

	helpers := map[string]func(testing.TB){
		"RequireRedis":    func(tb testing.TB) { stacktest.RequireRedis(tb) },
		"RequireZK":       func(tb testing.TB) { stacktest.RequireZK(tb) },
		"RequireEtcd":     func(tb testing.TB) { stacktest.RequireEtcd(tb) },
		"RequirePostgres": func(tb testing.TB) { stacktest.RequirePostgres(tb) },
	}
	for name, f := range helpers {
		t.Setenv(stacktest.EnvSkipIntegration, "")
		start := time.Now()
		fatal, skip := (&recordingTB{TB: t}).run(f)
		if skip != "" || !strings.Contains(fatal, stack.UpCommand) || !strings.Contains(fatal, dead) {
			t.Errorf("%s: fatal %q skip %q; want a failure naming %s and %s", name, fatal, skip, stack.UpCommand, dead)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %v to give up", name, d)
		}
		t.Setenv(stacktest.EnvSkipIntegration, "1")
		if fatal, skip := (&recordingTB{TB: t}).run(f); fatal != "" || skip == "" {
			t.Errorf("%s with %s=1: fatal %q skip %q; want a skip", name, stacktest.EnvSkipIntegration, fatal, skip)
		}
	}
}

func TestEnvDefaultsAndOverrides(t *testing.T) {
	t.Setenv(stack.EnvRedisAddrs, "")
	t.Setenv(stack.EnvZKServers, " ")
	t.Setenv(stack.EnvEtcdEndpoints, "")
	t.Setenv(stack.EnvDatabaseURL, "")
	if got := stack.RedisAddrs(); len(got) != 5 || got[0] != "127.0.0.1:6391" {
		t.Errorf("default RedisAddrs() = %v", got)
	}
	if got := stack.ZKServers(); len(got) != 3 || got[2] != "127.0.0.1:2183" {
		t.Errorf("default ZKServers() = %v", got)
	}
	if got := stack.EtcdEndpoints(); len(got) != 3 || got[0] != "127.0.0.1:2379" {
		t.Errorf("default EtcdEndpoints() = %v", got)
	}
	if got := stack.DatabaseURL(); got != stack.DefaultDatabaseURL {
		t.Errorf("default DatabaseURL() = %q", got)
	}
	t.Setenv(stack.EnvRedisAddrs, "a:1, b:2,")
	t.Setenv(stack.EnvDatabaseURL, "postgres://u@h:1/d")
	if got := stack.RedisAddrs(); len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Errorf("RedisAddrs() = %q, want [a:1 b:2]", got)
	}
	if got := stack.DatabaseURL(); got != "postgres://u@h:1/d" {
		t.Errorf("DatabaseURL() = %q", got)
	}
}

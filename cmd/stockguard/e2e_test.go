package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// The test binary doubles as the stockguard binary: started with this
// variable set, it runs main instead of the tests, so the multi-process
// tests need no separate build.
const beMain = "STOCKGUARD_TEST_BE_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(beMain) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// instance is one `stockguard serve` process started by a test.
type instance struct {
	cmd  *exec.Cmd
	url  string
	logs *strings.Builder
	mu   *sync.Mutex
	done chan error
}

// startInstance starts `stockguard serve` with args on a free loopback port
// and waits until it listens.
// sigterm sends in SIGTERM and waits, at most within, for it to exit 0;
// it returns how long that took.
func (in *instance) sigterm(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-in.done:
		in.done <- err
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v, want 0\n%s", err, in.log())
		}
	case <-time.After(within):
		t.Fatalf("still running %v after SIGTERM\n%s", within, in.log())
	}
	return time.Since(start)
}

func startInstance(t *testing.T, env []string, args ...string) *instance {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--addr=127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), beMain+"=1"), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{cmd: cmd, logs: &strings.Builder{}, mu: &sync.Mutex{}, done: make(chan error, 1)}
	cmd.Stderr = lockedWriter{in.logs, in.mu}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.stop(t) })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				lines <- u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { in.done <- cmd.Wait() }()
	select {
	case in.url = <-lines:
	case err := <-in.done:
		t.Fatalf("serve %v exited: %v\n%s", args, err, in.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve %v did not listen within 30 s\n%s", args, in.log())
	}
	return in
}

func (in *instance) log() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.logs.String()
}

// waitLog reports whether in's log holds s within the given time. A line
// the instance logged before it answered can reach the test after the
// answer: its stderr comes through a pipe that another goroutine copies.
func (in *instance) waitLog(s string, within time.Duration) bool {
	for deadline := time.Now().Add(within); !strings.Contains(in.log(), s); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// stop sends SIGTERM to the process we started, by PID, and waits; SIGKILL
// after 20 s.
func (in *instance) stop(t *testing.T) error {
	if in.cmd.ProcessState != nil {
		return nil
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-in.done:
		in.done <- err
		return err
	case <-time.After(20 * time.Second):
		_ = in.cmd.Process.Kill()
		t.Errorf("instance did not stop within 20 s of SIGTERM\n%s", in.log())
		return <-in.done
	}
}

type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func call(t *testing.T, method, url, body string, headers ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0, nil
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// hammer fires orders of one unit at one SKU through every instance at once
// and returns the SKU's audit and the count of 201s.
func hammer(t *testing.T, ins []*instance, sku string, stock, orders, clients int) (map[string]any, int64) {
	t.Helper()
	if st, body := call(t, "PUT", ins[0].url+"/v1/skus/"+sku, fmt.Sprintf(`{"available":%d}`, stock)); st != 200 {
		t.Fatalf("PUT: %d %v", st, body)
	}
	var next, created atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(orders) {
					return
				}
				st, body := call(t, "POST", ins[(c+int(n))%len(ins)].url+"/v1/orders",
					`{"lines":[{"sku":"`+sku+`","quantity":1}]}`)
				switch st {
				case 201:
					created.Add(1)
				case 409, 503:
				default:
					t.Errorf("order: %d %v", st, body)
				}
			}
		})
	}
	wg.Wait()
	_, audit := call(t, "GET", ins[0].url+"/v1/skus/"+sku+"/audit", "")
	return audit, created.Load()
}

func backendEnv(t *testing.T) []string {
	t.Helper()
	return []string{
		"STOCKGUARD_DATABASE_URL=" + stacktest.NewDatabase(t, context.Background()),
		"STOCKGUARD_REDIS_ADDRS=" + strings.Join(stacktest.RequireRedis(t), ","),
		"STOCKGUARD_ZK_SERVERS=" + strings.Join(stacktest.RequireZK(t), ","),
		"STOCKGUARD_ETCD_ENDPOINTS=" + strings.Join(stacktest.RequireEtcd(t), ","),
		"STOCKGUARD_LOG_LEVEL=warn",
	}
}

// TestThreeProcessHammer is the point of the product: three service
// processes share one hot SKU. Every real lock keeps the audit clean; the
// in-process lock does not.
func TestThreeProcessHammer(t *testing.T) {
	const stock, orders, clients = 150, 300, 24
	for _, backend := range []string{"local", "postgres", "redis", "redlock", "zookeeper", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			env := backendEnv(t)
			ins := make([]*instance, 3)
			for i := range ins {
				ins[i] = startInstance(t, env, "--lock="+backend, "--lock-wait=20s")
			}
			audit, created := hammer(t, ins, "hot-"+backend, stock, orders, clients)
			oversold, lost := audit["oversold"].(float64), audit["lost_units"].(float64)
			t.Logf("%s: %d orders reserved of %d stock; audit %v", backend, created, stock, audit)
			if backend == "local" || backend == "none" {
				if oversold == 0 && lost == 0 {
					t.Fatalf("%s across 3 processes showed no damage: %v", backend, audit)
				}
				return
			}
			if oversold != 0 || lost != 0 || audit["consistent"] != true {
				t.Fatalf("%s oversold %v, lost %v: %v", backend, oversold, lost, audit)
			}
			if created != stock || audit["held"].(float64) != stock {
				t.Fatalf("%s reserved %d orders, held %v; want exactly the stock %d", backend, created, audit["held"], stock)
			}
		})
	}
}

// TestGracefulShutdownDrains: SIGTERM lets an order paused inside its
// critical section finish (201) before the exit 0, and on a lock server its
// lease is released on the way out, not left there until its TTL.
func TestGracefulShutdownDrains(t *testing.T) {
	for _, backend := range []string{"local", "redis"} {
		t.Run(backend, func(t *testing.T) {
			env := backendEnv(t)
			rdb := redis.NewClient(&redis.Options{Addr: stacktest.RequireRedis(t)[0], DisableIdentity: true})
			defer rdb.Close()
			in := startInstance(t, env, "--lock="+backend, "--chaos")
			sku := fmt.Sprintf("drain-%d", time.Now().UnixNano())
			lockKey := "stockguard:{" + sku + "}:lock"
			if st, body := call(t, "PUT", in.url+"/v1/skus/"+sku, `{"available":5}`); st != 200 {
				t.Fatalf("PUT: %d %v", st, body)
			}
			result := make(chan int, 1)
			go func() {
				st, _ := call(t, "POST", in.url+"/v1/orders", `{"lines":[{"sku":"`+sku+`","quantity":1}]}`, "X-Chaos-Pause", "800ms")
				result <- st
			}()
			if !in.waitLog("chaos: pausing inside the critical section", 10*time.Second) {
				t.Fatalf("the order never paused\n%s", in.log())
			}
			if backend == "redis" {
				if n, err := rdb.Exists(t.Context(), lockKey).Result(); err != nil || n != 1 {
					t.Fatalf("EXISTS %s = %d, %v while the order pauses, want the lease's key", lockKey, n, err)
				}
			}
			in.sigterm(t, 15*time.Second)
			if st := <-result; st != 201 {
				t.Fatalf("in-flight order during shutdown answered %d, want 201", st)
			}
			if backend == "redis" {
				// The lease's TTL is 10 s: a key still there now was not released.
				if n, err := rdb.Exists(t.Context(), lockKey).Result(); err != nil || n != 0 {
					t.Errorf("EXISTS %s = %d, %v after the drained exit, want the lease released", lockKey, n, err)
				}
			}
		})
	}
}

// TestShutdownTimeoutCutsABatchShort: a batch still paused inside its
// critical section when --shutdown-timeout ends is cancelled, releases its
// lease before the process exits, and the stop is still exit 0.
func TestShutdownTimeoutCutsABatchShort(t *testing.T) {
	env := backendEnv(t)
	rdb := redis.NewClient(&redis.Options{Addr: stacktest.RequireRedis(t)[0], DisableIdentity: true})
	defer rdb.Close()
	in := startInstance(t, env, "--lock=redis", "--chaos", "--shutdown-timeout=1s")
	sku := fmt.Sprintf("cut-short-%d", time.Now().UnixNano())
	lockKey := "stockguard:{" + sku + "}:lock"
	if st, body := call(t, "PUT", in.url+"/v1/skus/"+sku, `{"available":5}`); st != 200 {
		t.Fatalf("PUT: %d %v", st, body)
	}
	go func() {
		// Cut off by the shutdown: its answer, if any, is not the point.
		req, _ := http.NewRequest("POST", in.url+"/v1/orders", strings.NewReader(`{"lines":[{"sku":"`+sku+`","quantity":1}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Chaos-Pause", "20s")
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	if !in.waitLog("chaos: pausing inside the critical section", 10*time.Second) {
		t.Fatalf("the order never paused\n%s", in.log())
	}
	if n, err := rdb.Exists(t.Context(), lockKey).Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS %s = %d, %v while the order pauses, want the lease's key", lockKey, n, err)
	}
	t.Logf("exited %v after SIGTERM", in.sigterm(t, 15*time.Second).Round(time.Millisecond))
	// The lease's TTL is 10 s: a key still there now was not released.
	if n, err := rdb.Exists(t.Context(), lockKey).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %s = %d, %v after the exit, want the lease released", lockKey, n, err)
	}
	if !strings.Contains(in.log(), "shutdown timeout reached: the batches still running were cancelled") {
		t.Errorf("no warning about the batch cut short:\n%s", in.log())
	}
}

func TestUsageErrors(t *testing.T) {
	var out, errOut strings.Builder
	getenv := func(k string) string {
		if k == "STOCKGUARD_LOCK" {
			return "chubby"
		}
		return ""
	}
	err := run(context.Background(), []string{"serve"}, getenv, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "chubby") || exitCode(err) != 2 {
		t.Fatalf("serve with STOCKGUARD_LOCK=chubby = %v", err)
	}
	err = run(context.Background(), []string{"serve", "--fencing=maybe"}, func(string) string { return "" }, &out, &errOut)
	if err == nil || exitCode(err) != 2 {
		t.Fatalf("--fencing=maybe = %v", err)
	}
	for _, arg := range []string{"--coalesce-gatherers=0", "--coalesce-gatherers=-3", "--coalesce-gatherers=many"} {
		if err := run(context.Background(), []string{"serve", arg}, func(string) string { return "" }, &out, &errOut); exitCode(err) != 2 {
			t.Fatalf("%s = %v, want a usage error", arg, err)
		}
	}
	if err := run(context.Background(), []string{"frobnicate"}, func(string) string { return "" }, &out, &errOut); exitCode(err) != 2 {
		t.Fatalf("unknown command = %v", err)
	}
}

// TestRepeatedSIGTERMStillDrains: `timeout(1)`, and any supervisor that
// signals the process and then its group, delivers SIGTERM twice within
// microseconds; the second is the same request again, not "kill at once"
// (only a second SIGINT is), so the in-flight order is still answered and
// serve exits 0.
func TestRepeatedSIGTERMStillDrains(t *testing.T) {
	env := backendEnv(t)
	in := startInstance(t, env, "--lock=local", "--chaos")
	if st, _ := call(t, "PUT", in.url+"/v1/skus/drain2", `{"available":5}`); st != 200 {
		t.Fatal("PUT failed")
	}
	type answer struct {
		status int
		err    error
	}
	result := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", in.url+"/v1/orders", strings.NewReader(`{"lines":[{"sku":"drain2","quantity":1}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Chaos-Pause", "800ms")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			result <- answer{0, err}
			return
		}
		res.Body.Close()
		result <- answer{res.StatusCode, nil}
	}()
	time.Sleep(300 * time.Millisecond)
	// What `timeout 1h stockguard serve` does on its own SIGTERM: the
	// child, then the process group.
	for range 2 {
		if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a := <-result
	err := <-in.done
	in.done <- err
	if a.status != 201 {
		t.Errorf("in-flight order during shutdown: status %d, err %v; want 201 (drained)", a.status, a.err)
	}
	if err != nil {
		t.Errorf("exit after SIGTERM (sent twice): %v, want exit 0\n%s", err, in.log())
	}
}

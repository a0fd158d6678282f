package deploy

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// chartBase is every case's first values file: one replica of a backend
// that dials nothing, and a database that refuses at once, so that a
// configuration serve accepts exits 1 (the database) without waiting.
const chartBase = `replicaCount: 1
lock:
  backend: local
database:
  url: postgres://x@127.0.0.1:1/x?sslmode=disable&connect_timeout=2
`

// TestChartRendersOnlyWhatServeAccepts: for every value the chart hands to
// serve, written in a values file as YAML has it (unquoted on and off are
// booleans, numbers are floats), the chart either refuses to render or
// renders what serve accepts; otherwise every replica would crash-loop
// with exit 2 (README, "Kubernetes"). What renders is run: the real binary
// gets the rendered container's arguments and environment, the Secret's
// values included, and must get as far as the database (exit 1).
func TestChartRendersOnlyWhatServeAccepts(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "stockguard")
	build := exec.Command("go", "build", "-o", bin, "./cmd/stockguard")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name, values string
		want         string            // a refusal naming this; "": renders
		env          map[string]string // rendered as these, when it renders
	}{
		{"defaults", "", "", map[string]string{"STOCKGUARD_FENCING": "on", "STOCKGUARD_DB_MAX_CONNS": "16", "STOCKGUARD_SHUTDOWN_TIMEOUT": "20s"}},
		// values.yaml: "--fencing: on or off". Unquoted, YAML reads both
		// as booleans, which rendered "true" and "false".
		{"fencing: off", "lock:\n  fencing: off\n", "", map[string]string{"STOCKGUARD_FENCING": "off"}},
		{"fencing: on", "lock:\n  fencing: on\n", "", map[string]string{"STOCKGUARD_FENCING": "on"}},
		{"fencing: no", "lock:\n  fencing: no\n", "", map[string]string{"STOCKGUARD_FENCING": "off"}},
		{"fencing quoted", "lock:\n  fencing: \"off\"\n", "", map[string]string{"STOCKGUARD_FENCING": "off"}},
		{"fencing neither", "lock:\n  fencing: maybe\n", "lock.fencing", nil},
		{"fencing a number", "lock:\n  fencing: 1\n", "lock.fencing", nil},
		{"unknown backend", "lock:\n  backend: zk\n", "lock.backend", nil},
		// The chart's drain check accepted any wait under the drain.
		{"no lock wait", "lock:\n  wait: 0s\n", "lock.wait", nil},
		{"lock wait of a day", "lock:\n  wait: 24h\nshutdown:\n  drainSeconds: 86401\n", "", map[string]string{"STOCKGUARD_LOCK_WAIT": "24h"}},
		{"lock wait past a day", "lock:\n  wait: 25h\nshutdown:\n  drainSeconds: 100000\n", "lock.wait", nil},
		{"lock TTL of a day", "lock:\n  ttl: 24h\n", "", nil},
		{"lock TTL past a day", "lock:\n  ttl: 1000h\n", "lock.ttl", nil},
		{"drain not whole seconds", "lock:\n  wait: 19500ms\nshutdown:\n  drainSeconds: 19.9\n", "shutdown.drainSeconds", nil},
		{"drain as a string", "shutdown:\n  drainSeconds: \"30\"\n", "", map[string]string{"STOCKGUARD_SHUTDOWN_TIMEOUT": "30s"}},
		{"no pool", "database:\n  maxConns: 0\n", "database.maxConns", nil},
		{"pool of a fraction", "database:\n  maxConns: 16.5\n", "database.maxConns", nil},
		{"pool not a number", "database:\n  maxConns: sixteen\n", "database.maxConns", nil},
		// A float64 from a million on rendered as 1e+06.
		{"pool of a million", "database:\n  maxConns: 1000000\n", "", map[string]string{"STOCKGUARD_DB_MAX_CONNS": "1000000"}},
		{"port zero", "service:\n  port: 0\n", "service.port", nil},
		{"port out of range", "service:\n  port: 70000\n", "service.port", nil},
		{"redlock masters as a YAML list", "lock:\n  backend: redlock\n  redisAddrs: [127.0.0.1:6391, 127.0.0.1:6392, 127.0.0.1:6393]\n", "",
			map[string]string{"STOCKGUARD_REDIS_ADDRS": "127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393"}},
		{"redlock master without a port", "lock:\n  backend: redlock\n  redisAddrs: 127.0.0.1:6391,127.0.0.1,127.0.0.1:6393\n", `"127.0.0.1": want host:port`, nil},
		{"redis port zero", "lock:\n  backend: redis\n  redisAddrs: 127.0.0.1:0\n", "lock.redisAddrs", nil},
		{"redlock master twice", "lock:\n  backend: redlock\n  redisAddrs: 127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6391\n", "names a server twice", nil},
		{"zookeeper server with a path", "lock:\n  backend: zookeeper\n  zkServers: 127.0.0.1:2181/chroot\n", "lock.zkServers", nil},
		{"etcd endpoints of each form", "lock:\n  backend: etcd\n  etcdEndpoints: 127.0.0.1:2379, http://127.0.0.1:2479/, https://[::1]:2579, unix:///run/etcd.sock\n", "", nil},
		{"etcd endpoint of another scheme", "lock:\n  backend: etcd\n  etcdEndpoints: ftp://127.0.0.1:2379\n", "lock.etcdEndpoints", nil},
		{"extra settings as YAML types", "extraEnv:\n  STOCKGUARD_COALESCE: off\n  STOCKGUARD_MAX_IN_FLIGHT: 1000000\n  STOCKGUARD_CHAOS: true\n", "",
			map[string]string{"STOCKGUARD_COALESCE": "off", "STOCKGUARD_MAX_IN_FLIGHT": "1000000", "STOCKGUARD_CHAOS": "true"}},
		// Set twice, the later one would win past the chart's checks.
		{"extra setting the chart owns", "extraEnv:\n  STOCKGUARD_LOCK_WAIT: 0s\n", "extraEnv.STOCKGUARD_LOCK_WAIT", nil},
		{"metrics address as an extra setting", "extraEnv:\n  STOCKGUARD_METRICS_ADDR: 0.0.0.0:9090\n", "extraEnv.STOCKGUARD_METRICS_ADDR: the chart sets it from metrics.port", nil},
		{"metrics on a port of its own", "metrics:\n  port: 9090\n", "", map[string]string{"STOCKGUARD_METRICS_ADDR": "0.0.0.0:9090"}},
		{"metrics port as a string", "metrics:\n  port: \"9090\"\n", "", map[string]string{"STOCKGUARD_METRICS_ADDR": "0.0.0.0:9090"}},
		// serve refuses two listeners on one port.
		{"metrics on the API's port", "metrics:\n  port: 8080\n", "metrics.port", nil},
		{"metrics port zero", "metrics:\n  port: 0\n", "metrics.port", nil},
		{"metrics port out of range", "metrics:\n  port: 70000\n", "metrics.port", nil},
		{"admin token", "adminToken:\n  value: s3cret\n", "", nil},
		{"admin token from a block scalar", "adminToken:\n  value: |\n    s3cret\n", "adminToken.value", nil},
		{"admin token a number", "adminToken:\n  value: 12345678901234567890\n", "adminToken.value", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			base, values := filepath.Join(dir, "base.yaml"), filepath.Join(dir, "values.yaml")
			if err := os.WriteFile(base, []byte(chartBase), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(values, []byte(c.values), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"template", "sg", chart, kubeVersion, "-f", base, "-f", values}
			if c.want != "" {
				out, err := exec.Command(helmBinary(t), args...).CombinedOutput()
				if err == nil || !strings.Contains(string(out), c.want) {
					t.Fatalf("helm template = %v, want a failure naming %q\n%s", err, c.want, out)
				}
				return
			}
			r := decode(t, helm(t, args...))
			if len(r.deployments) != 1 {
				t.Fatalf("%d deployments", len(r.deployments))
			}
			ctr := r.deployments[0].Spec.Template.Spec.Containers[0]
			env := containerEnv(t, ctr, r.secrets)
			for k, v := range c.env {
				if got := env[k]; got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			code, out := runServe(t, bin, ctr.Args, env)
			if code != 1 || !strings.Contains(out, "127.0.0.1:1") {
				t.Errorf("serve with the rendered environment exited %d, want 1 (the database refused: every setting accepted)\nenv %v\n%s",
					code, env, out)
			}
		})
	}
}

// containerEnv is ctr's environment, each secretKeyRef read from the
// rendered Secrets.
func containerEnv(t *testing.T, ctr corev1.Container, secrets []corev1.Secret) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		found := false
		for _, s := range secrets {
			if v, ok := s.StringData[ref.Key]; ok && s.Name == ref.Name {
				env[e.Name], found = v, true
			}
		}
		if !found {
			t.Fatalf("%s: no rendered Secret %s holds %q", e.Name, ref.Name, ref.Key)
		}
	}
	return env
}

// runServe runs bin with args and nothing but env (and PATH), and returns
// its exit status and output.
func runServe(t *testing.T, bin string, args []string, env map[string]string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestServeRefusesBadSettings: a bad address, server list or pool size is
// a usage error (exit 2) naming the flag and its variable, found before
// serve dials anything: the database given listens nowhere, so a check that
// came after the connection would fail with exit 1 instead. Every address
// is on loopback, so that a check that came too late dials nothing else.
func TestServeRefusesBadSettings(t *testing.T) {
	const nowhere = "--database-url=postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=1"
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"listen address without a host", map[string]string{"STOCKGUARD_ADDR": "8080"}, []string{"--lock=local", nowhere},
			[]string{"--addr=", "STOCKGUARD_ADDR", "8080"}},
		{"listen port not a number", nil, []string{"--lock=local", "--addr=127.0.0.1:http", nowhere}, []string{"--addr=", "bad port"}},
		{"metrics address", nil, []string{"--lock=local", "--metrics-addr=bogus", nowhere}, []string{"--metrics-addr=", "STOCKGUARD_METRICS_ADDR"}},
		{"database URL", nil, []string{"--lock=local", "--database-url=postgres://u:s3cret@%zz/db"},
			[]string{"--database-url (STOCKGUARD_DATABASE_URL)", "cannot parse"}},
		{"database URL from the variable", map[string]string{"STOCKGUARD_DATABASE_URL": "mysql://u@db/x"}, []string{"--lock=local"},
			[]string{"STOCKGUARD_DATABASE_URL"}},
		{"no pool", nil, []string{"--lock=local", "--db-max-conns=0", nowhere}, []string{"--db-max-conns=", "STOCKGUARD_DB_MAX_CONNS"}},
		{"negative pool", map[string]string{"STOCKGUARD_DB_MAX_CONNS": "-1"}, []string{"--lock=local", nowhere}, []string{"STOCKGUARD_DB_MAX_CONNS"}},
		{"redis address without a port", nil, []string{"--lock=redis", "--redis-addrs=notahost", nowhere},
			[]string{"--redis-addrs=", "STOCKGUARD_REDIS_ADDRS", "notahost"}},
		{"redis without servers", nil, []string{"--lock=redis", "--redis-addrs= , ", nowhere}, []string{"--redis-addrs=", "at least 1"}},
		{"redis port out of range", nil, []string{"--lock=redis", "--redis-addrs=127.0.0.1:70000", nowhere}, []string{"bad port"}},
		{"redis port zero", nil, []string{"--lock=redis", "--redis-addrs=127.0.0.1:0", nowhere}, []string{"bad port"}},
		{"redis address without a host", nil, []string{"--lock=redis", "--redis-addrs=:6379", nowhere}, []string{"host is empty"}},
		{"redlock on two masters", map[string]string{"STOCKGUARD_REDIS_ADDRS": "127.0.0.1:1,127.0.0.1:2"}, []string{"--lock=redlock", nowhere},
			[]string{"STOCKGUARD_REDIS_ADDRS", "at least 3"}},
		{"redlock with a master twice", nil, []string{"--lock=redlock", "--redis-addrs=127.0.0.1:1,127.0.0.1:2,127.0.0.1:1", nowhere},
			[]string{"--redis-addrs=", "are the same server"}},
		{"redlock with a master spelled twice", nil, []string{"--lock=redlock", "--redis-addrs=127.0.0.1:6391,127.0.0.1:06391,127.0.0.1:6392", nowhere},
			[]string{"--redis-addrs=", `"127.0.0.1:6391" and "127.0.0.1:06391" are the same server`}},
		{"redlock with a master by name and address", nil, []string{"--lock=redlock", "--redis-addrs=127.0.0.1:6391,127.0.0.1:6392,localhost:6391", nowhere},
			[]string{"--redis-addrs=", "are the same server"}},
		{"etcd endpoint twice, with and without a scheme", nil, []string{"--lock=etcd", "--etcd-endpoints=127.0.0.1:2379,http://127.0.0.1:2379", nowhere},
			[]string{"--etcd-endpoints=", "are the same server"}},
		{"metrics on the API's port", nil, []string{"--lock=local", "--addr=127.0.0.1:18910", "--metrics-addr=127.0.0.1:18910", nowhere},
			[]string{"--metrics-addr=", `the port of --addr="127.0.0.1:18910"`}},
		{"pprof on the API's port", nil, []string{"--lock=local", "--addr=:18910", "--debug-addr=localhost:18910", nowhere},
			[]string{"--debug-addr=", "the port of --addr"}},
		{"pprof port not a number", nil, []string{"--lock=local", "--debug-addr=127.0.0.1:notaport", nowhere}, []string{"--debug-addr=", "bad port"}},
		{"pprof port out of range", nil, []string{"--lock=local", "--debug-addr=localhost:99999", nowhere}, []string{"--debug-addr=", "bad port"}},
		{"admin token ending in a newline", map[string]string{"STOCKGUARD_ADMIN_TOKEN": "s3cret\n"}, []string{"--lock=local", nowhere},
			[]string{"STOCKGUARD_ADMIN_TOKEN", "whitespace"}},
		{"zookeeper server without a port", nil, []string{"--lock=zookeeper", "--zk-servers=127.0.0.1:1,127.0.0.2", nowhere},
			[]string{"--zk-servers=", "STOCKGUARD_ZK_SERVERS", `"127.0.0.2"`}},
		{"etcd endpoint URL without a port", nil, []string{"--lock=etcd", "--etcd-endpoints=http://127.0.0.1", nowhere},
			[]string{"--etcd-endpoints=", "STOCKGUARD_ETCD_ENDPOINTS"}},
		{"etcd endpoint of another scheme", nil, []string{"--lock=etcd", "--etcd-endpoints=ftp://127.0.0.1:1", nowhere}, []string{`scheme "ftp"`}},
		{"etcd endpoint with a path", nil, []string{"--lock=etcd", "--etcd-endpoints=http://127.0.0.1:1/v3", nowhere}, []string{"no path"}},
		{"negative coalescing window", nil, []string{"--lock=local", "--coalesce-window=-1ms", nowhere},
			[]string{`--coalesce-window="-1ms" (STOCKGUARD_COALESCE_WINDOW)`, "auto or 0 to 100ms"}},
		{"coalescing window too long", map[string]string{"STOCKGUARD_COALESCE_WINDOW": "1s"}, []string{"--lock=local", nowhere},
			[]string{`--coalesce-window="1s" (STOCKGUARD_COALESCE_WINDOW)`, "auto or 0 to 100ms"}},
		{"coalescing window not a duration", nil, []string{"--lock=local", "--coalesce-window=soon", nowhere}, []string{`--coalesce-window="soon"`, "auto or a duration"}},
		{"unknown backend", map[string]string{"STOCKGUARD_LOCK": "zk"}, []string{nowhere}, []string{`--lock="zk" (STOCKGUARD_LOCK)`}},
		{"fencing neither on nor off", map[string]string{"STOCKGUARD_FENCING": "maybe"}, []string{"--lock=local", nowhere},
			[]string{`--fencing="maybe" (STOCKGUARD_FENCING): want on or off`}},
		{"coalescing neither on nor off", nil, []string{"--lock=local", "--coalesce=yes", nowhere}, []string{`--coalesce="yes" (STOCKGUARD_COALESCE)`}},
		{"no batch", nil, []string{"--lock=local", "--coalesce-max-batch=0", nowhere}, []string{`--coalesce-max-batch="0" (STOCKGUARD_COALESCE_MAX_BATCH)`}},
		{"no hold", map[string]string{"STOCKGUARD_COALESCE_MAX_HOLD": "0s"}, []string{"--lock=local", nowhere}, []string{"(STOCKGUARD_COALESCE_MAX_HOLD)"}},
		{"lease TTL too short", map[string]string{"STOCKGUARD_LOCK_TTL": "50ms"}, []string{"--lock=local", nowhere},
			[]string{`--lock-ttl="50ms" (STOCKGUARD_LOCK_TTL): want at least 100ms`}},
		{"no lock wait", nil, []string{"--lock=local", "--lock-wait=0s", nowhere}, []string{`--lock-wait="0s" (STOCKGUARD_LOCK_WAIT)`}},
		{"no reaping", nil, []string{"--lock=local", "--reap-interval=-1s", nowhere}, []string{"(STOCKGUARD_REAP_INTERVAL)"}},
		{"no read timeout", map[string]string{"STOCKGUARD_READ_TIMEOUT": "0s"}, []string{"--lock=local", nowhere}, []string{`--read-timeout="0s" (STOCKGUARD_READ_TIMEOUT)`}},
		{"no shutdown timeout", nil, []string{"--lock=local", "--shutdown-timeout=0s", nowhere}, []string{"(STOCKGUARD_SHUTDOWN_TIMEOUT)"}},
		{"tiny header limit", nil, []string{"--lock=local", "--max-header-bytes=10", nowhere}, []string{`--max-header-bytes="10" (STOCKGUARD_MAX_HEADER_BYTES)`}},
		{"nothing in flight", nil, []string{"--lock=local", "--max-in-flight=0", nowhere}, []string{"(STOCKGUARD_MAX_IN_FLIGHT)"}},
		// Past each ceiling (limits.go) serve misbehaved only after it had
		// dialled every server: httpapi's body-slot channel of 2 × 2^62
		// panicked; the request and write deadlines, sums of --lock-wait
		// and --read-timeout, wrapped negative and bounded nothing; Go's
		// server answered every request 431.
		{"in flight past the open-file ceiling", nil, []string{"--lock=local", "--max-in-flight=4611686018427387904", nowhere},
			[]string{`--max-in-flight="4611686018427387904" (STOCKGUARD_MAX_IN_FLIGHT): want 1 to 1048576`}},
		{"lock wait near Go's longest duration", map[string]string{"STOCKGUARD_LOCK_WAIT": "2562047h47m10s"}, []string{"--lock=local", nowhere},
			[]string{`--lock-wait="2562047h47m10s" (STOCKGUARD_LOCK_WAIT): want at most 24h0m0s`}},
		{"read timeout past a day", nil, []string{"--lock=local", "--read-timeout=24h0m1s", nowhere},
			[]string{`--read-timeout="24h0m1s" (STOCKGUARD_READ_TIMEOUT): want at most 24h0m0s`}},
		{"lease TTL past a day", nil, []string{"--lock=local", "--lock-ttl=2562047h", nowhere},
			[]string{`--lock-ttl="2562047h0m0s" (STOCKGUARD_LOCK_TTL): want at most 24h0m0s`}},
		{"header limit past Go's default", nil, []string{"--lock=local", "--max-header-bytes=9223372036854775807", nowhere},
			[]string{`--max-header-bytes="9223372036854775807" (STOCKGUARD_MAX_HEADER_BYTES): want 1024 to 1048576`}},
		{"log level", map[string]string{"STOCKGUARD_LOG_LEVEL": "loud"}, []string{"--lock=local", nowhere},
			[]string{`--log-level="loud" (STOCKGUARD_LOG_LEVEL)`}},
		{"pprof off loopback", nil, []string{"--lock=local", "--debug-addr=0.0.0.0:6060", nowhere}, []string{`--debug-addr="0.0.0.0:6060" (STOCKGUARD_DEBUG_ADDR)`, "loopback"}},
		{"bad variable", map[string]string{"STOCKGUARD_LOCK_TTL": "bogus"}, []string{"--lock=local", nowhere}, []string{`--lock-ttl (STOCKGUARD_LOCK_TTL="bogus")`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var stdout, stderr strings.Builder
			getenv := func(k string) string { return c.env[k] }
			err := run(ctx, append([]string{"serve"}, c.args...), getenv, &stdout, &stderr)
			if exitCode(err) != exitUsage {
				t.Fatalf("exit %d (%v), want %d\nstderr:\n%s", exitCode(err), err, exitUsage, stderr.String())
			}
			for _, w := range append(c.want, `Run "stockguard serve --help" for its flags.`) {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "s3cret") {
				t.Errorf("stderr shows the database password:\n%s", stderr.String())
			}
		})
	}
}

// TestCommandLineWinsOverTheEnvironment: a variable under a flag given on
// the command line is not read, so a bad one does not stop serve (which
// then gets as far as its database, here nowhere: exit 1, not 2).
func TestCommandLineWinsOverTheEnvironment(t *testing.T) {
	env := map[string]string{"STOCKGUARD_LOCK_TTL": "bogus", "STOCKGUARD_FENCING": "maybe", "STOCKGUARD_LOG_LEVEL": "loud"}
	var stdout, stderr strings.Builder
	err := run(context.Background(), []string{"serve", "--lock=local", "--lock-ttl=5s", "--fencing=on", "--log-level=error",
		"--database-url=postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=1"}, func(k string) string { return env[k] }, &stdout, &stderr)
	if err == nil || exitCode(err) == exitUsage || strings.Contains(stderr.String(), "STOCKGUARD_") {
		t.Fatalf("exit %d (%v), want the database's failure, not a usage error\nstderr:\n%s", exitCode(err), err, stderr.String())
	}
}

// TestAcceptedSettings: the forms each client library dials pass the checks.
func TestAcceptedSettings(t *testing.T) {
	for _, args := range [][]string{
		{"--lock=local", "--addr=:8080", "--db-max-conns=1"},
		{"--lock=local", "--addr=[::]:0", "--metrics-addr=127.0.0.1:9090"},
		{"--lock=local", "--addr=:0", "--metrics-addr=:0", "--debug-addr=127.0.0.1:0"},
		{"--lock=local", "--addr=127.0.0.1:8080", "--metrics-addr=127.0.0.2:8080"},
		{"--lock=redlock", "--redis-addrs=127.0.0.1:6391,127.0.0.1:6392,localhost:6393"},
		{"--lock=local", "--database-url=host=db dbname=stockguard sslmode=disable"},
		{"--lock=none", "--redis-addrs=unused,by,none"},
		{"--lock=redis", "--redis-addrs=[::1]:6379"},
		{"--lock=redlock", "--redis-addrs=r1:6379, r2:6379 ,r3:6379"},
		{"--lock=zookeeper", "--zk-servers=zk-0.zk:2181"},
		{"--lock=etcd", "--etcd-endpoints=127.0.0.1:2379,http://etcd-1:2379,https://etcd-2:2379/"},
		{"--lock=etcd", "--etcd-endpoints=unix:///run/etcd.sock"},
		{"--lock=postgres"},
		{"--lock=local", "--coalesce-window=0"},
		{"--lock=local", "--coalesce-window=100ms"},
		{"--lock=redlock", "--coalesce-window=auto"},
	} {
		if _, err := validateServe(t, args...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// validateServe parses and validates serve's flags as serve does, without
// connecting to anything.
func validateServe(t *testing.T, args ...string) (*config, error) {
	t.Helper()
	var c config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return &c, c.validate()
}

// TestWarnOpenAdmin: serve says so when anyone who reaches it may set
// stock, and only then.
func TestWarnOpenAdmin(t *testing.T) {
	for _, c := range []struct {
		addr, token string
		warn        bool
	}{
		{":8080", "", true},
		{"0.0.0.0:8080", "", true},
		{"[::]:8080", "", true},
		{"10.1.2.3:8080", "", true},
		{"0.0.0.0:8080", "s3cret", false},
		{"127.0.0.1:8080", "", false},
		{"[::1]:8080", "", false},
		{"localhost:8080", "", false},
	} {
		var buf bytes.Buffer
		warnOpenAdmin(slog.New(slog.NewTextHandler(&buf, nil)), c.addr, c.token)
		if got := strings.Contains(buf.String(), "no admin token"); got != c.warn {
			t.Errorf("addr %q, token %q: warned %v, want %v; log: %s", c.addr, c.token, got, c.warn, buf.String())
		}
	}
}

// TestMigrateRefusesBadDatabaseURL: migrate checks its URL as serve does.
func TestMigrateRefusesBadDatabaseURL(t *testing.T) {
	var stdout, stderr strings.Builder
	err := run(context.Background(), []string{"migrate", "--database-url=mysql://u:s3cret@db/x"}, func(string) string { return "" }, &stdout, &stderr)
	if exitCode(err) != exitUsage || !strings.Contains(stderr.String(), "STOCKGUARD_DATABASE_URL") || strings.Contains(stderr.String(), "s3cret") {
		t.Fatalf("exit %d (%v), want %d naming the variable without the password\nstderr:\n%s", exitCode(err), err, exitUsage, stderr.String())
	}
}

// TestCoalesceWindowAuto: auto is a window on redlock, redis and postgres,
// where a batch's own rounds and commits are what an instance spends, and
// none on zookeeper, whose batches hand their leases over; a duration given
// is used on every backend.
func TestCoalesceWindowAuto(t *testing.T) {
	for _, c := range []struct {
		lock, window string
		want         time.Duration
	}{
		{"redlock", "auto", autoWindow},
		{"redis", "auto", autoWindow},
		{"postgres", "auto", autoWindow},
		{"zookeeper", "auto", 0},
		{"redlock", "0", 0},
		{"postgres", "5ms", 5 * time.Millisecond},
	} {
		got, err := parseWindow(c.window, c.lock)
		if err != nil || got != c.want {
			t.Errorf("parseWindow(%q, %q) = %v, %v; want %v", c.window, c.lock, got, err, c.want)
		}
	}
}

// TestEndpointLoggedWithoutCredentials: the "tracing on" line keeps
// credentials in the OTLP endpoint's URL out of the log.
func TestEndpointLoggedWithoutCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:TopSecretTok@collector:4318": "http://collector:4318",
		"https://TopSecretTok@collector:4318/v1":  "https://collector:4318/v1",
		"http://collector:4318":                   "http://collector:4318",
	} {
		if got := withoutUserinfo(in); got != want {
			t.Errorf("withoutUserinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

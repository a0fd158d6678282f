package procs

import (
	"strings"
	"testing"
)

func TestServeArgs(t *testing.T) {
	o := ServeOptions{Lock: "redlock", Fencing: "on", AdminToken: "t", RedisAddrs: "a:1,b:2", DatabaseURL: "postgres://x"}
	got := strings.Join(o.args("127.0.0.1:9"), " ")
	want := "serve --addr=127.0.0.1:9 --lock=redlock --fencing=on --redis-addrs=a:1,b:2 --database-url=postgres://x"
	if got != want {
		t.Errorf("args:\n got %s\nwant %s", got, want)
	}
}

// TestServeFlagsReachArgs: --serve-flag reaches the instances' command line.
func TestServeFlagsReachArgs(t *testing.T) {
	o := ServeOptions{Lock: "redlock", Fencing: "on", AdminToken: "t", Extra: []string{"--coalesce=off", "--coalesce-max-batch=8"}}
	if got := strings.Join(o.args("127.0.0.1:9"), " "); !strings.HasSuffix(got, " --coalesce=off --coalesce-max-batch=8") {
		t.Errorf("args: %s", got)
	}
}

// TestEnvironIsExplicit: an instance gets the basics and the variables the
// options set, never the caller's other STOCKGUARD_* variables.
func TestEnvironIsExplicit(t *testing.T) {
	t.Setenv("STOCKGUARD_COALESCE", "off")
	t.Setenv("PATH", "/usr/bin:/bin")
	o := ServeOptions{Lock: "redis", Fencing: "on", AdminToken: "s3cret", DatabaseURL: "postgres://u:pw@h:5432/db"}
	env := strings.Join(o.Environ(), " ")
	if !strings.Contains(env, "PATH=/usr/bin:/bin") || !strings.Contains(env, "STOCKGUARD_ADMIN_TOKEN=s3cret") {
		t.Errorf("environ lacks the basics or the token: %s", env)
	}
	if strings.Contains(env, "COALESCE") {
		t.Errorf("the caller's STOCKGUARD_COALESCE reached the instance: %s", env)
	}
	s := o.Setup()
	rec := strings.Join(append(s.Args, s.Env...), " ")
	if strings.Contains(rec, "s3cret") || strings.Contains(rec, "pw@") {
		t.Errorf("a secret is recorded: %s", rec)
	}
	for _, want := range []string{"STOCKGUARD_ADMIN_TOKEN=<redacted>", "--database-url=postgres://u:<redacted>@h:5432/db", "--lock=redis"} {
		if !strings.Contains(rec, want) {
			t.Errorf("record lacks %q: %s", want, rec)
		}
	}
}

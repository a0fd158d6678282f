package procs

import (
	"strings"
	"testing"
)

func TestServeArgs(t *testing.T) {
	o := ServeOptions{Lock: "redlock", Fencing: "on", AdminToken: "t", RedisAddrs: "a:1,b:2", DatabaseURL: "postgres://x"}
	got := strings.Join(o.args("127.0.0.1:9"), " ")
	want := "serve --addr=127.0.0.1:9 --lock=redlock --fencing=on --admin-token=t --redis-addrs=a:1,b:2 --database-url=postgres://x"
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

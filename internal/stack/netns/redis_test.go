//go:build linux

package netns_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// redisServer is where scripts/stack.sh installs Redis (apt-get install -y
// redis-server).
const redisServer = "/usr/bin/redis-server"

// TestRedisAcrossMembers runs a real redis-server inside member a and a
// go-redis client whose sockets live in member b, then cuts and heals the
// link between them.
func TestRedisAcrossMembers(t *testing.T) {
	if _, err := os.Stat(redisServer); err != nil {
		if os.Getenv(stacktest.EnvSkipIntegration) == "1" {
			t.Skipf("%s missing and %s=1: %v", redisServer, stacktest.EnvSkipIntegration, err)
		}
		t.Fatalf("%s missing (install it: apt-get install -y redis-server, or bash scripts/stack.sh up): %v", redisServer, err)
	}
	topo := newTopology(t, "a", "b")
	dir := t.TempDir()
	cmd := exec.Command(redisServer, "--port", "6379", "--bind", topo.Member("a").Addr().String(),
		"--protected-mode", "no", "--save", "", "--appendonly", "no", "--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"))
	srv, err := topo.Start("a", cmd)
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	addr := fmt.Sprintf("%s:6379", topo.Member("a").Addr())
	client := redis.NewClient(&redis.Options{
		Addr:            addr,
		Dialer:          topo.Member("b").DialContext,
		DialTimeout:     cutTimeout,
		ReadTimeout:     cutTimeout,
		WriteTimeout:    cutTimeout,
		MaxRetries:      -1,
		DisableIdentity: true,
	})
	t.Cleanup(func() { _ = client.Close() })

	ping := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), cutTimeout)
		defer cancel()
		return client.Ping(ctx).Err()
	}
	deadline := time.Now().Add(readyTimeout)
	for err := ping(); err != nil; err = ping() {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server (pid %d) in a not reachable from b within %v: %v", srv.PID(), readyTimeout, err)
		}
		time.Sleep(pollInterval)
	}
	ctx := t.Context()
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	if err := topo.Partition(ctx, []string{"a"}, []string{"b"}); err != nil {
		t.Fatalf("Partition: %v", err)
	}
	// The pooled connection stalls and a new one cannot be made.
	mustTimeOut(t, ping(), "PING across the partition")

	if err := topo.Heal(ctx); err != nil {
		t.Fatalf("Heal: %v", err)
	}
	deadline = time.Now().Add(readyTimeout)
	for {
		v, err := client.Get(ctx, "k").Result()
		if err == nil {
			if v != "v" {
				t.Fatalf("GET k after heal = %q, want v", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET after heal: %v", err)
		}
		time.Sleep(pollInterval)
	}
}

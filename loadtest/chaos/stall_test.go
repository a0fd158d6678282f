package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deafInstance is an instance that never serves: its URL refuses
// connections and its log stays empty, so no order of it ever reaches a
// stall between claim and write.
type deafInstance struct{ log string }

func (d deafInstance) baseURL() string             { return "http://127.0.0.1:1" }
func (d deafInstance) logFile() string             { return d.log }
func (d deafInstance) pid() int                    { return 0 }
func (d deafInstance) signal(syscall.Signal) error { return nil }

// TestChaosStallNeverReachedFailsTheFault checks that every scenario whose
// fault needs a holder stalled between claim and write fails when none gets
// there, as CHAOS.md promises, instead of injecting a fault that tests
// nothing and passing.
func TestChaosStallNeverReachedFailsTheFault(t *testing.T) {
	for _, tc := range []struct{ scenario, backend string }{
		{"pause-holder", "redis"},
		{"zk-session-expiry", "zookeeper"},
		{"redis-clock-jump", "redis"},
		{"redis-failover", "redis"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			t.Parallel()
			sc := scenarioByName(tc.scenario)
			if sc == nil {
				t.Fatalf("no scenario %q", tc.scenario)
			}
			cc := Config{LockTTL: time.Second, RequestTimeout: time.Second}
			e := newChaosEnv(cc, chaosPlan{sc: sc, backend: tc.backend, fencing: "on"}, t.TempDir(), nil)
			e.ins = []instance{deafInstance{log: filepath.Join(e.dir, "victim.log")}}
			e.load = newChaosLoad(e.urls(), []string{"sku-a"}, "stall-test", 1, time.Second)
			if tc.scenario == "redis-failover" {
				link, err := e.newForwarder("127.0.0.1:1")
				if err != nil {
					t.Fatal(err)
				}
				e.failover = &failoverRig{link: link}
			}
			t.Cleanup(func() {
				e.load.stop()
				for _, f := range e.fwds {
					_ = f.Close()
				}
			})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err := runFault(ctx, sc, e)
			if err == nil || !strings.Contains(err.Error(), "no stalled order reached its stall") {
				t.Fatalf("fault's error = %v, want the stall never reached", err)
			}
		})
	}
}

// runFault runs the scenario's fault, a panic (a fault that went on past
// the stall into servers that are not there) turned into an error.
func runFault(ctx context.Context, sc *scenario, e *chaosEnv) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("fault went on past the missing stall and panicked: %v", r)
		}
	}()
	return sc.fault(ctx, e)
}

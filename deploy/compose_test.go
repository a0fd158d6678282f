package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestComposeDrain: docker-compose.yml's instances drain for longer than a
// request may wait for its locks, and Docker waits for the drain before it
// kills them.
func TestComposeDrain(t *testing.T) {
	var compose struct {
		Service struct {
			Environment     map[string]string `json:"environment"`
			StopGracePeriod string            `json:"stop_grace_period"`
		} `json:"x-stockguard"`
	}
	readCompose(t, &compose)
	env := compose.Service.Environment
	drain, err := time.ParseDuration(env["STOCKGUARD_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("STOCKGUARD_SHUTDOWN_TIMEOUT = %q: %v", env["STOCKGUARD_SHUTDOWN_TIMEOUT"], err)
	}
	wait := 5 * time.Second // serve's default --lock-wait
	if v, ok := env["STOCKGUARD_LOCK_WAIT"]; ok {
		if wait, err = time.ParseDuration(v); err != nil {
			t.Fatalf("STOCKGUARD_LOCK_WAIT = %q: %v", v, err)
		}
	}
	grace, err := time.ParseDuration(compose.Service.StopGracePeriod)
	if err != nil {
		t.Fatalf("stop_grace_period = %q: %v", compose.Service.StopGracePeriod, err)
	}
	if !(wait < drain && drain < grace) {
		t.Errorf("lock wait %v, drain %v, stop grace period %v: want wait < drain < grace", wait, drain, grace)
	}
}

// TestComposeEtcdBuilt: the etcd members are built from Debian's packages
// (etcd.Dockerfile), the etcd scripts/stack.sh runs, not pulled: the
// versioned third-party etcd tags the file once named were withdrawn.
func TestComposeEtcdBuilt(t *testing.T) {
	var compose struct {
		Etcd struct {
			Build struct {
				Context    string `json:"context"`
				Dockerfile string `json:"dockerfile"`
			} `json:"build"`
		} `json:"x-etcd"`
	}
	readCompose(t, &compose)
	b := compose.Etcd.Build
	df, err := os.ReadFile(filepath.Join("..", b.Context, b.Dockerfile))
	if err != nil {
		t.Fatalf("x-etcd builds %s/%s: %v", b.Context, b.Dockerfile, err)
	}
	for _, want := range []string{"etcd-server", "etcd-client", `ENTRYPOINT ["etcd"]`} {
		if !strings.Contains(string(df), want) {
			t.Errorf("%s lacks %q", b.Dockerfile, want)
		}
	}
}

// readCompose decodes docker-compose.yml into v.
func readCompose(t *testing.T, v any) {
	t.Helper()
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

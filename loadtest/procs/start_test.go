package procs

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets this test binary act as a `stockguard serve` that is
// healthy but never ready, when Start runs it with the serve command line.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		serveNeverReady(os.Args[2:])
		return
	}
	os.Exit(m.Run())
}

// serveNeverReady answers /healthz 200 and /readyz 503 on --addr until
// SIGTERM ends the process.
func serveNeverReady(args []string) {
	var addr string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--addr="); ok {
			addr = v
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		os.Exit(1)
	}
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/healthz" {
			_, _ = w.Write([]byte(`{"status":"ok"}`))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"not_ready","message":"not ready"}}`))
	}))
}

// TestStartNeverReady: instances that are healthy but never ready all
// start; the first one's wait for readiness does not eat the time the
// others have to answer /healthz.
func TestStartNeverReady(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := ServeOptions{Bin: os.Args[0], Lock: "redis", Fencing: "on", LogDir: t.TempDir()}
	start := time.Now()
	ins, err := Start(ctx, o, 3, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := StopAll(ins); err != nil {
		t.Log(err) // killed by SIGTERM's default action: not a clean exit
	}
	if len(ins) != 3 {
		t.Fatalf("%d instances", len(ins))
	}
	// Two readiness waits of 2 s: the first instance's, then the others'
	// together.
	if el := time.Since(start); el > 8*time.Second {
		t.Errorf("Start took %v", el)
	}
}

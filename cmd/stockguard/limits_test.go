package main

import (
	"flag"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/httpapi"
)

// TestLimitsAtTheirCeilings: the largest values validate accepts (each one
// past them is refused, TestServeRefusesBadSettings) still make a working
// server. The request and write deadlines are the documented sums, not
// overflowed ones; httpapi makes its slots for the largest in-flight bound;
// and Go's server answers a request under the largest header limit.
func TestLimitsAtTheirCeilings(t *testing.T) {
	c, err := validateServe(t, "--lock=local", "--chaos", "--lock-wait=24h", "--lock-ttl=24h", "--read-timeout=24h",
		"--max-in-flight=1048576", "--max-header-bytes=1048576")
	if err != nil {
		t.Fatalf("the ceilings are refused: %v", err)
	}
	rt := requestTimeout(c.lockWait, c.chaos)
	if want := 24*time.Hour + requestMargin + httpapi.MaxChaosPause; rt != want {
		t.Errorf("request timeout %s, want --lock-wait + %s + %s = %s", rt, requestMargin, httpapi.MaxChaosPause, want)
	}
	handler := httpapi.New(httpapi.Config{MaxInFlight: c.limits.maxInFlight, RequestTimeout: rt})
	srv := c.limits.server(handler, rt, slog.New(slog.DiscardHandler))
	if want := 24*time.Hour + rt + writeGrace; srv.WriteTimeout != want {
		t.Errorf("write timeout %s, want --read-timeout + %s + %s = %s", srv.WriteTimeout, rt, writeGrace, want)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+ln.Addr().String()+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Padding", strings.Repeat("x", 64<<10)) // past the default limit, well under the ceiling
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz with 64 KiB of headers under --max-header-bytes=1048576: %s, want 200", resp.Status)
	}
}

// TestHeaderLimitSlack: Go's server answers 431 only about 4 KiB past
// --max-header-bytes (net/http's slack), and the help text says so, as
// README and openapi do: said to be the bound, the flag let 20 KiB of
// headers through under 16 KiB.
func TestHeaderLimitSlack(t *testing.T) {
	var l serverLimits
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	l.register(fs)
	if err := fs.Parse([]string{"--max-header-bytes=16384"}); err != nil {
		t.Fatal(err)
	}
	if usage := fs.Lookup("max-header-bytes").Usage; !strings.Contains(usage, "about 4 KiB") {
		t.Errorf("--max-header-bytes help %q does not mention net/http's slack of about 4 KiB", usage)
	}
	srv := l.server(httpapi.New(httpapi.Config{}), time.Second, slog.New(slog.DiscardHandler))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, c := range []struct{ pad, want int }{
		{16<<10 + 3<<10, http.StatusOK},                          // within the slack
		{16<<10 + 5<<10, http.StatusRequestHeaderFieldsTooLarge}, // past it
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+ln.Addr().String()+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Padding", strings.Repeat("x", c.pad))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET /healthz with %d bytes of headers under --max-header-bytes=16384: %s, want %d", c.pad, resp.Status, c.want)
		}
	}
}

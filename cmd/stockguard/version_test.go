package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"version"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "stockguard ") || !strings.HasPrefix(lines[1], "commit ") ||
		lines[2] != runtime.Version() {
		t.Fatalf("stockguard version printed %q", out.String())
	}
}

func TestDebugAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"": true, "127.0.0.1:6060": true, "[::1]:6060": true, "localhost:6060": true, "127.0.0.2:0": true,
		"0.0.0.0:6060": false, ":6060": false, "10.1.2.3:6060": false, "[::]:6060": false, "example.com:6060": false, "6060": false,
	} {
		if err := checkDebugAddr(addr); (err == nil) != ok || err != nil && exitCode(err) != 2 {
			t.Errorf("--debug-addr=%q: %v", addr, err)
		}
	}
	var out strings.Builder
	err := run(context.Background(), []string{"serve", "--debug-addr=0.0.0.0:6060"}, func(string) string { return "" }, &out, io.Discard)
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("serve --debug-addr=0.0.0.0:6060 = %v, want a usage error", err)
	}
}

func TestDebugServesPprof(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	stop, err := startDebug(addr, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	res, err := c.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("pprof answered %d %.200s", res.StatusCode, body)
	}
	// The command line may hold secrets (--admin-token, --database-url).
	res, err = c.Get("http://" + addr + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound || strings.Contains(string(body), os.Args[0]) {
		t.Errorf("/debug/pprof/cmdline answered %d %.200s, want 404 without the command line", res.StatusCode, body)
	}
	stop()
	if _, err := c.Get("http://" + addr + "/debug/pprof/"); err == nil {
		t.Fatal("pprof still answers after stop")
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/metrics"
)

// TestLibLogRepeats: a library line repeated within the window is logged
// once, as JSON at WARN; the next one after the window says how many were
// left out.
func TestLibLogRepeats(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	l := newLibLog(slog.New(slog.NewJSONHandler(&buf, nil)), time.Minute)
	l.now = func() time.Time { return now }
	r := redisLog{l}
	const dial = "redis: connection pool: failed to dial after %d attempts: %v"
	for i := range 100 {
		r.Printf(t.Context(), dial, i, "connection refused")
	}
	r.Printf(t.Context(), "redis: another kind %d", 1)
	now = now.Add(time.Minute)
	r.Printf(t.Context(), dial, 101, "connection refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil {
		t.Fatal(err)
	}
	if last["level"] != "WARN" || last["source"] != "go-redis" || last["repeats_not_logged"] != float64(99) ||
		!strings.Contains(last["msg"].(string), "failed to dial after 101 attempts") {
		t.Errorf("line after the window: %v", last)
	}
}

// TestStderrIsJSON: with every Redlock master down and the trace collector
// unreachable, each line serve writes to stderr is a JSON object: go-redis's
// pool and OpenTelemetry's exporter report through the service's logger,
// the pool's dial failures at most once a kind per window; the startup line
// gives durations as Go durations, and the lock outage is logged as a WARN
// naming its cause.
func TestStderrIsJSON(t *testing.T) {
	env := append(backendEnv(t), "STOCKGUARD_LOG_LEVEL=info",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+closedAddrs(t, 1), "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_EXPORTER_OTLP_TIMEOUT=500")
	in := startInstance(t, env, "--lock=redlock", "--redis-addrs="+closedAddrs(t, 5), "--lock-wait=300ms")
	var logs string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		call(t, "GET", in.url+"/v1/skus/traced-nowhere", "")
		logs = in.log()
		if strings.Contains(logs, `"source":"opentelemetry"`) && strings.Contains(logs, "lock backend unreachable") {
			break
		}
	}
	time.Sleep(2 * time.Second) // let the pool's dial failures pile up
	logs = in.log()
	var serving, otelLine, down map[string]any
	redisLines := 0
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("not a JSON line on stderr: %q", line)
			continue
		}
		switch {
		case m["msg"] == "serving":
			serving = m
		case m["source"] == "opentelemetry":
			otelLine = m
		case m["source"] == "go-redis":
			redisLines++
		case m["msg"] == "lock backend unreachable":
			down = m
		}
	}
	if serving == nil || serving["lock_ttl"] != "10s" || serving["lock_wait"] != "300ms" {
		t.Errorf("serving line %v, want lock_ttl 10s and lock_wait 300ms", serving)
	}
	if otelLine == nil || otelLine["level"] != "WARN" {
		t.Errorf("no OpenTelemetry WARN line:\n%s", logs)
	}
	if redisLines > 4 {
		t.Errorf("%d go-redis lines within seconds: the pool's repeats are not held back\n%s", redisLines, logs)
	}
	if down == nil || down["level"] != "WARN" || down["cause"] == "" || down["cause"] == nil {
		t.Errorf("lock outage line %v, want a WARN with its cause\n%s", down, logs)
	}
}

// TestWatchLockLogsFlips: one WARN with the cause when the backend goes
// down, nothing while it stays down, one INFO when it is back.
func TestWatchLockLogsFlips(t *testing.T) {
	answers := []metrics.LockHealth{{Healthy: true}, {Error: "dial tcp: connection refused"}, {Error: "dial tcp: connection refused"},
		{Error: "i/o timeout"}, {Healthy: true}, {Healthy: true}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n := 0
	check := func(context.Context) metrics.LockHealth {
		h := answers[n]
		if n++; n == len(answers) {
			cancel()
		}
		return h
	}
	var buf bytes.Buffer
	watchLock(ctx, check, time.Millisecond, slog.New(slog.NewJSONHandler(&buf, nil)))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"level":"WARN","msg":"lock backend unreachable","cause":"dial tcp: connection refused"`) ||
		!strings.Contains(lines[1], `"level":"INFO","msg":"lock backend reachable again"`) {
		t.Fatalf("log:\n%s", buf.String())
	}
}

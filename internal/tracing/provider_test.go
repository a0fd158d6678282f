package tracing_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/internal/tracing"
	"github.com/stockguard/stockguard/internal/tracing/tracingtest"
)

func TestNewOffInstallsNothing(t *testing.T) {
	p, err := tracing.New(context.Background(), env(nil), "v1.0.0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if p.Enabled() || p.TracerProvider() != nil {
		t.Fatalf("tracing on without any OTEL_* variable: enabled %v, provider %v", p.Enabled(), p.TracerProvider())
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown of the off provider: %v", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	if _, err := tracing.New(context.Background(), env(map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}), "", slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("New accepted OTEL_TRACES_EXPORTER=jaeger")
	}
}

// TestShutdownFlushes checks the whole export path: the variables turn
// tracing on, the span reaches an OTLP endpoint with the service's
// resource, and Shutdown is what sends it (the batcher would wait 5 s).
func TestShutdownFlushes(t *testing.T) {
	c := tracingtest.NewCollector(t)
	ctx := context.Background()
	p, err := tracing.New(ctx, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": c.URL,
		"OTEL_SERVICE_NAME": "stock-test"}), "v1.2.3", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if !p.Enabled() {
		t.Fatal("tracing off with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	_, span := p.TracerProvider().Tracer("test").Start(ctx, "flushed")
	span.End()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	reqs, paths := c.Requests()
	if len(reqs) != 1 || paths[0] != "/v1/traces" {
		t.Fatalf("collector got %d requests on %v, want 1 on /v1/traces", len(reqs), paths)
	}
	rs := reqs[0].GetResourceSpans()
	if len(rs) != 1 {
		t.Fatalf("%d resource spans, want 1", len(rs))
	}
	attrs := map[string]string{}
	for _, kv := range rs[0].GetResource().GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	if attrs["service.name"] != "stock-test" || attrs["service.version"] != "v1.2.3" {
		t.Fatalf("resource = %v, want service.name stock-test and service.version v1.2.3", attrs)
	}
	var names []string
	for _, ss := range rs[0].GetScopeSpans() {
		for _, s := range ss.GetSpans() {
			names = append(names, s.GetName())
		}
	}
	if len(names) != 1 || names[0] != "flushed" {
		t.Fatalf("spans exported = %v, want [flushed]", names)
	}
}

// TestBadResourceAttributesWarns: an OTEL_RESOURCE_ATTRIBUTES entry the SDK
// cannot read (no '=') is dropped with a warning, as the spec has it; the
// other entries still describe the spans, and tracing starts.
func TestBadResourceAttributesWarns(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment,team=stock")
	c := tracingtest.NewCollector(t)
	ctx := context.Background()
	var log bytes.Buffer
	p, err := tracing.New(ctx, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": c.URL, "OTEL_SERVICE_NAME": "stock-test"}),
		"v1.2.3", slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatalf("New with OTEL_RESOURCE_ATTRIBUTES=deployment.environment,team=stock: %v, want a warning and a start", err)
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "deployment.environment") {
		t.Errorf("log %q, want a warning naming the entry dropped", log.String())
	}
	_, span := p.TracerProvider().Tracer("test").Start(ctx, "flushed")
	span.End()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	reqs, _ := c.Requests()
	if len(reqs) != 1 || len(reqs[0].GetResourceSpans()) != 1 {
		t.Fatalf("collector got %d requests, want 1 with one resource", len(reqs))
	}
	attrs := map[string]string{}
	for _, kv := range reqs[0].GetResourceSpans()[0].GetResource().GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	if attrs["team"] != "stock" || attrs["service.name"] != "stock-test" || attrs["service.version"] != "v1.2.3" {
		t.Errorf("resource = %v, want team stock, service.name stock-test and service.version v1.2.3", attrs)
	}
}

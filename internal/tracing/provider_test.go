package tracing_test

import (
	"context"
	"testing"

	"github.com/stockguard/stockguard/internal/tracing"
	"github.com/stockguard/stockguard/internal/tracing/tracingtest"
)

func TestNewOffInstallsNothing(t *testing.T) {
	p, err := tracing.New(context.Background(), env(nil), "v1.0.0")
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
	if _, err := tracing.New(context.Background(), env(map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}), ""); err == nil {
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
		"OTEL_SERVICE_NAME": "stock-test"}), "v1.2.3")
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

package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/stockguard/stockguard/internal/tracing"
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

// collector is an OTLP/HTTP receiver that keeps what it was sent.
type collector struct {
	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
	path string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := new(collectortrace.ExportTraceServiceRequest)
	if err == nil {
		err = proto.Unmarshal(body, req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.reqs, c.path = append(c.reqs, req), r.URL.Path
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write([]byte{}) // an empty ExportTraceServiceResponse
}

// TestShutdownFlushes checks the whole export path: the variables turn
// tracing on, the span reaches an OTLP endpoint with the service's
// resource, and Shutdown is what sends it (the batcher would wait 5 s).
func TestShutdownFlushes(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	ctx := context.Background()
	p, err := tracing.New(ctx, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
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

	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reqs) != 1 || c.path != "/v1/traces" {
		t.Fatalf("collector got %d requests (last on %q), want 1 on /v1/traces", len(c.reqs), c.path)
	}
	rs := c.reqs[0].GetResourceSpans()
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

// Package tracingtest is an OTLP/HTTP trace receiver for tests: point
// OTEL_EXPORTER_OTLP_ENDPOINT at a Collector's URL and read what arrived.
package tracingtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Collector keeps every export request it is sent.
type Collector struct {
	// URL is the base URL, the value for OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	mu    sync.Mutex
	reqs  []*collectortrace.ExportTraceServiceRequest
	paths []string
}

// NewCollector starts a Collector, stopped when the test ends.
func NewCollector(tb testing.TB) *Collector {
	tb.Helper()
	c := &Collector{}
	srv := httptest.NewServer(http.HandlerFunc(c.serve))
	tb.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
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
	c.reqs, c.paths = append(c.reqs, req), append(c.paths, r.URL.Path)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK) // an empty body is an empty ExportTraceServiceResponse
}

// Requests returns the export requests received so far and the path each
// was posted to.
func (c *Collector) Requests() ([]*collectortrace.ExportTraceServiceRequest, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*collectortrace.ExportTraceServiceRequest(nil), c.reqs...), append([]string(nil), c.paths...)
}

// Spans returns every span received so far.
func (c *Collector) Spans() []*tracepb.Span {
	reqs, _ := c.Requests()
	var out []*tracepb.Span
	for _, r := range reqs {
		for _, rs := range r.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				out = append(out, ss.GetSpans()...)
			}
		}
	}
	return out
}

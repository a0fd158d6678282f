package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/lock"
)

const (
	remoteTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	remoteSpan  = "00f067aa0ba902b7"
)

func TestServerSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var placeErr error
	var seen trace.SpanContext
	svc := &recorder{place: func(ctx context.Context, _ inventory.PlaceRequest) (*inventory.Order, bool, error) {
		seen = trace.SpanContextFromContext(ctx)
		if placeErr != nil {
			return nil, false, placeErr
		}
		return &inventory.Order{Status: inventory.StatusReserved}, false, nil
	}}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Service: svc, TracerProvider: tp}))
	defer srv.Close()

	tests := []struct {
		name, method, path string
		err                error
		status             int
		span, route, code  string
		failed             bool
	}{
		{name: "placed", method: "POST", path: "/v1/orders", status: 201, span: "POST /v1/orders", route: "/v1/orders"},
		{name: "client error", method: "POST", path: "/v1/orders", status: 409, span: "POST /v1/orders", route: "/v1/orders",
			err: &inventory.StockError{SKU: "a", Requested: 1}, code: "insufficient_stock"},
		{name: "server side", method: "POST", path: "/v1/orders", status: 503, span: "POST /v1/orders", route: "/v1/orders",
			err: fmt.Errorf("redlock: no quorum: %w", lock.ErrUnavailable), code: "lock_unavailable", failed: true},
		{name: "route template, not path", method: "GET", path: "/v1/skus/sku-42", status: 200, span: "GET /v1/skus/:sku",
			route: "/v1/skus/:sku"},
		{name: "unknown route", method: "GET", path: "/no/such/route-1", status: 404, span: "HTTP unmatched", code: "not_found"},
		{name: "unknown method", method: "BREW", path: "/v1/orders", status: 405, span: "HTTP unmatched", code: "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			placeErr, seen = tt.err, trace.SpanContext{}
			before := len(rec.Ended())
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(`{"lines":[{"sku":"a","quantity":1}]}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("traceparent", "00-"+remoteTrace+"-"+remoteSpan+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			ended := rec.Ended()[before:]
			if len(ended) != 1 {
				t.Fatalf("%d spans for one request, want 1", len(ended))
			}
			s := ended[0]
			a := map[attribute.Key]attribute.Value{}
			for _, kv := range s.Attributes() {
				a[kv.Key] = kv.Value
			}
			switch {
			case s.Name() != tt.span || s.SpanKind() != trace.SpanKindServer:
				t.Fatalf("span %q (%v), want server span %q", s.Name(), s.SpanKind(), tt.span)
			case s.SpanContext().TraceID().String() != remoteTrace || s.Parent().SpanID().String() != remoteSpan:
				t.Fatalf("span in trace %v under %v, want the traceparent's %s under %s",
					s.SpanContext().TraceID(), s.Parent().SpanID(), remoteTrace, remoteSpan)
			case a["http.response.status_code"].AsInt64() != int64(tt.status):
				t.Fatalf("status attribute %v, want %d", a["http.response.status_code"], tt.status)
			case a["http.route"].AsString() != tt.route:
				t.Fatalf("route attribute %q, want %q", a["http.route"].AsString(), tt.route)
			case a["stockguard.error.code"].AsString() != tt.code:
				t.Fatalf("error code attribute %q, want %q", a["stockguard.error.code"].AsString(), tt.code)
			case (s.Status().Code == codes.Error) != tt.failed:
				t.Fatalf("span status %v, want failed = %v", s.Status(), tt.failed)
			case a["stockguard.request_id"].AsString() != resp.Header.Get("X-Request-Id"):
				t.Fatalf("request id attribute %q, answer's %q", a["stockguard.request_id"].AsString(), resp.Header.Get("X-Request-Id"))
			}
			if tt.path == "/v1/orders" && tt.method == "POST" && seen.SpanID() != s.SpanContext().SpanID() {
				t.Fatalf("the service saw span %v, want the server span %v", seen.SpanID(), s.SpanContext().SpanID())
			}
		})
	}

	t.Run("probes are not traced", func(t *testing.T) {
		before := len(rec.Ended())
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if n := len(rec.Ended()) - before; n != 0 {
			t.Fatalf("/healthz made %d spans", n)
		}
	})
}

// TestHostileTraceparent: a traceparent that is not one (bytes that are not
// text, a huge value, a forged all-zero id) is ignored: the request is
// answered as usual and its span starts a trace of its own.
func TestHostileTraceparent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	svc := &recorder{place: func(context.Context, inventory.PlaceRequest) (*inventory.Order, bool, error) {
		return &inventory.Order{Status: inventory.StatusReserved}, false, nil
	}}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Service: svc, TracerProvider: tp}))
	defer srv.Close()
	for _, v := range []string{
		"00-\xff\xfe" + strings.Repeat("z", 40) + "-01",
		"00-" + strings.Repeat("a", 16<<10) + "-" + remoteSpan + "-01",
		"00-00000000000000000000000000000000-0000000000000000-01",
		"ff-" + remoteTrace + "-" + remoteSpan + "-01",
	} {
		before := len(rec.Ended())
		req, err := http.NewRequest("POST", srv.URL+"/v1/orders", strings.NewReader(`{"lines":[{"sku":"a","quantity":1}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", v)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("traceparent %.40q: status %d, want 201", v, resp.StatusCode)
		}
		ended := rec.Ended()[before:]
		if len(ended) != 1 || ended[0].Parent().IsValid() {
			t.Fatalf("traceparent %.40q: spans %v, want one root span", v, ended)
		}
	}
}

// TestTraceContextHeaderLists: the W3C trace context headers are read as
// lists (the W3C suite's test_traceparent_duplicated and
// test_tracestate_multiple_headers_different_keys): traceparent sent twice
// starts a new trace, as a doubled X-Request-Id or Authorization is none,
// and tracestate sent in two fields is continued whole.
func TestTraceContextHeaderLists(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	svc := &recorder{place: func(context.Context, inventory.PlaceRequest) (*inventory.Order, bool, error) {
		return &inventory.Order{Status: inventory.StatusReserved}, false, nil
	}}
	h := httpapi.New(httpapi.Config{Service: svc, TracerProvider: tp})
	parent := func(header http.Header) trace.SpanContext {
		t.Helper()
		before := len(rec.Ended())
		hostileReq{"POST", "/v1/orders", oneLine, header}.serve(h)
		ended := rec.Ended()[before:]
		if len(ended) != 1 {
			t.Fatalf("%d spans, want 1", len(ended))
		}
		return ended[0].Parent()
	}

	if p := parent(http.Header{"Traceparent": {
		"00-" + remoteTrace + "-" + remoteSpan + "-01",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}}); p.IsValid() {
		t.Errorf("two traceparent fields: span continues trace %s, want a new root trace", p.TraceID())
	}
	p := parent(http.Header{"Traceparent": {"00-" + remoteTrace + "-" + remoteSpan + "-01"}, "Tracestate": {"foo=1", "bar=2"}})
	if p.TraceID().String() != remoteTrace || p.TraceState().String() != "foo=1,bar=2" {
		t.Errorf("tracestate sent as foo=1 and bar=2 in two fields: continued trace %s with %q, want %s with both members",
			p.TraceID(), p.TraceState(), remoteTrace)
	}
}

// TestTracedPathIsUTF8: a path a client percent-encoded into bytes that are
// not UTF-8 (or that the length cap cuts inside a character) is still a
// valid attribute, since one invalid string fails the exporter's whole
// batch.
func TestTracedPathIsUTF8(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := httpapi.New(httpapi.Config{Service: &recorder{}, TracerProvider: tp})
	for _, path := range []string{"/v1/skus/a%FF/audit", "/v1/skus/" + strings.Repeat("a", 246) + "%C3%A9"} {
		before := len(rec.Ended())
		hostileReq{"GET", path, "", nil}.serve(h)
		ended := rec.Ended()[before:]
		if len(ended) != 1 {
			t.Fatalf("GET %.40q: %d spans, want 1", path, len(ended))
		}
		for _, kv := range ended[0].Attributes() {
			if kv.Key == semconv.URLPathKey && !utf8.ValidString(kv.Value.AsString()) {
				t.Errorf("GET %.40q: url.path %q is not UTF-8", path, kv.Value.AsString())
			}
		}
	}
}

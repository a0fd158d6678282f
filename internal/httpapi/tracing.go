package httpapi

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracingScope is the instrumentation scope of the HTTP server spans.
const tracingScope = "github.com/stockguard/stockguard/internal/httpapi"

// unmatchedSpan names the span of every request no route matched: a name
// per path would let any client create span names without bound.
const unmatchedSpan = "HTTP unmatched"

// Attribute keys of the server span beyond the semantic conventions.
const (
	attrErrorCode = attribute.Key("stockguard.error.code")
	attrRequestID = attribute.Key("stockguard.request_id")
)

// maxTracedPath bounds url.path on a span: the path is the client's.
const maxTracedPath = 256

// untraced are the routes that get no span: probes and scrapes arrive
// every few seconds and would bury the requests worth reading.
var untraced = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// useTracing installs the server span middleware when the service has a
// tracer provider; without one nothing is installed, so a request pays
// nothing for tracing that is off.
func (s *server) useTracing(r *gin.Engine) {
	if s.TracerProvider == nil {
		return
	}
	t := requestTracer{tracer: s.TracerProvider.Tracer(tracingScope)}
	r.Use(t.handle)
}

type requestTracer struct {
	tracer trace.Tracer
	// prop reads W3C traceparent and tracestate; used directly rather than
	// through otel's global propagator, which nothing here sets.
	prop propagation.TraceContext
}

// traceHeaders reads the W3C trace context headers as lists (RFC 9110
// §5.3), where propagation.HeaderCarrier reads only a header's first field:
// tracestate sent in several fields is one list, all of it continued, and
// traceparent sent twice is none, as W3C Trace Context's test suite has it:
// the request starts a trace of its own, since which field counts would be
// up to every proxy on the way.
type traceHeaders http.Header

func (h traceHeaders) Get(key string) string {
	vs := http.Header(h).Values(key)
	switch {
	case len(vs) == 1:
		return vs[0]
	case len(vs) > 1 && strings.EqualFold(key, "tracestate"):
		return strings.Join(vs, ",")
	}
	return ""
}

// Set and Keys complete propagation.TextMapCarrier; Extract only calls Get.
func (h traceHeaders) Set(key, value string) { http.Header(h).Set(key, value) }

func (h traceHeaders) Keys() []string { return propagation.HeaderCarrier(h).Keys() }

// handle makes one server span per request, named by its route template
// ("POST /v1/orders"), continuing the trace the client's traceparent
// names. It runs first, so the span covers every other middleware.
func (t requestTracer) handle(c *gin.Context) {
	route := c.FullPath() // gin has matched the route before any handler runs
	if untraced[route] {
		c.Next()
		return
	}
	method := methodLabel(c.Request.Method)
	name := unmatchedSpan
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(method)}
	if method == "other" {
		attrs[0] = semconv.HTTPRequestMethodOther
	}
	if route != "" {
		name = method + " " + route
		attrs = append(attrs, semconv.HTTPRoute(route))
	}
	path := c.Request.URL.Path
	if len(path) > maxTracedPath {
		path = path[:maxTracedPath]
	}
	// The path arrives percent-decoded, any bytes a client chose; an
	// attribute that is not UTF-8 fails the exporter's whole batch, every
	// other request's spans with it.
	path = strings.ToValidUTF8(path, "\uFFFD")
	attrs = append(attrs, semconv.URLPath(path))

	ctx := t.prop.Extract(c.Request.Context(), traceHeaders(c.Request.Header))
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	defer span.End()
	c.Request = c.Request.WithContext(ctx)
	c.Next()

	status := c.Writer.Status()
	span.SetAttributes(semconv.HTTPResponseStatusCode(status), attrRequestID.String(c.GetString(requestIDHeader)))
	if len(c.Errors) > 0 {
		_, body := classify(c.Errors[0].Err)
		span.SetAttributes(attrErrorCode.String(body.Code))
		// A 4xx is the client's error, not the server's: the conventions
		// leave a server span's status unset for it.
		if status >= http.StatusInternalServerError {
			span.SetAttributes(semconv.ErrorTypeKey.String(body.Code))
			span.SetStatus(codes.Error, body.Message)
		}
	} else if status >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}

package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockguard/stockguard/internal/tracing"
)

func TestStartBatchLinksEveryRequest(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx := context.Background()
	reqTracer := tp.Tracer("http")

	var reqCtxs []context.Context
	var reqs []trace.SpanContext
	var reqSpans []trace.Span
	for range 3 {
		c, s := reqTracer.Start(ctx, "POST /v1/orders")
		reqCtxs, reqSpans = append(reqCtxs, c), append(reqSpans, s)
		reqs = append(reqs, s.SpanContext())
	}
	reqs = append(reqs, trace.SpanContext{}) // a request that carries no span

	bt := tracing.NewTracer(tp)
	// The leader's context holds its own request span: the batch must not
	// become that request's child.
	bctx, batch := bt.StartBatch(reqCtxs[0], reqs, 4)
	_, child := tp.Tracer("db").Start(bctx, "postgres claim")
	child.End()
	for _, c := range reqCtxs {
		tracing.Joined(c, batch)
	}
	batch.End()
	for _, s := range reqSpans {
		s.End()
	}

	spans := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = append(spans[s.Name()], s)
	}
	b := spans[tracing.BatchSpan]
	if len(b) != 1 {
		t.Fatalf("%d batch spans, want 1", len(b))
	}
	bs := b[0]
	if bs.Parent().IsValid() {
		t.Fatalf("batch span has parent %v, want a root of its own", bs.Parent())
	}
	if got := bs.Links(); len(got) != 3 {
		t.Fatalf("batch span has %d links, want 3 (one per traced request)", len(got))
	}
	for i, l := range bs.Links() {
		if l.SpanContext.SpanID() != reqs[i].SpanID() {
			t.Fatalf("link %d to %v, want request span %v", i, l.SpanContext.SpanID(), reqs[i].SpanID())
		}
	}
	attrs := map[string]int64{}
	for _, kv := range bs.Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInt64()
	}
	if attrs[string(tracing.AttrBatchOrders)] != 4 || attrs[string(tracing.AttrBatchRequests)] != 3 {
		t.Fatalf("batch attributes = %v, want 4 orders and 3 requests", attrs)
	}
	if c := spans["postgres claim"]; len(c) != 1 || c[0].Parent().SpanID() != bs.SpanContext().SpanID() {
		t.Fatal("work on the batch's context is not the batch span's child")
	}
	for i, s := range spans["POST /v1/orders"] {
		if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != bs.SpanContext().SpanID() {
			t.Fatalf("request span %d links %v, want the batch span", i, l)
		}
	}
}

func TestNilTracerMakesNoSpans(t *testing.T) {
	var bt *tracing.Tracer = tracing.NewTracer(nil)
	ctx := context.Background()
	got, span := bt.StartBatch(ctx, nil, 1)
	if got != ctx || span.SpanContext().IsValid() || span.IsRecording() {
		t.Fatalf("nil Tracer started a span: %v", span.SpanContext())
	}
	tracing.Joined(ctx, span) // must not panic on a context without a span
	span.End()
}

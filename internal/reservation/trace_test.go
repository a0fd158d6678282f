package reservation_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stockguard/stockguard/internal/reservation"
	"github.com/stockguard/stockguard/internal/tracing"
)

// TestBatchSpanLinksRequests: the span of an acquisition and its batch is
// linked to the span of every request it placed, and each request's span
// back to it.
func TestBatchSpanLinksRequests(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := newFixture(t, reservation.Coalescing{})
	svc := reservation.New(reservation.Config{Store: f.store, Locker: f.locker, LockWait: 5 * time.Second,
		Tracer: tracing.NewTracer(tp)})
	f.stock("a", 10)
	tr := tp.Tracer("test")
	ctx, reqSpan := tr.Start(context.Background(), "POST /v1/orders")
	if _, _, err := svc.Place(ctx, req("", line("a", 1))); err != nil {
		t.Fatal(err)
	}
	reqSpan.End()
	var batch, request sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case tracing.BatchSpan:
			batch = s
		case "POST /v1/orders":
			request = s
		}
	}
	if batch == nil || request == nil {
		t.Fatalf("spans %v: want a batch span and the request's", rec.Ended())
	}
	if l := batch.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != request.SpanContext().SpanID() {
		t.Fatalf("batch links %v, want the request span", l)
	}
	if l := request.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != batch.SpanContext().SpanID() {
		t.Fatalf("request links %v, want the batch span", l)
	}
}

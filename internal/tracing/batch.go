package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ReservationScope is the instrumentation scope of the spans the
// reservation layer makes through Tracer.
const ReservationScope = "github.com/stockguard/stockguard/internal/reservation"

// BatchSpan is the name of a coalesced batch's span.
const BatchSpan = "reservation.batch"

// Attribute keys of the batch span.
const (
	// AttrBatchOrders is the number of orders the batch decides.
	AttrBatchOrders = attribute.Key("stockguard.batch.orders")
	// AttrBatchRequests is the number of traced requests it links to.
	AttrBatchRequests = attribute.Key("stockguard.batch.requests")
)

// Tracer makes the reservation layer's spans. A nil *Tracer is valid and
// makes none, so the service holds one unconditionally and pays nothing
// when tracing is off.
type Tracer struct {
	tracer trace.Tracer
}

// NewTracer returns the reservation layer's Tracer on tp, or nil when tp
// is nil (tracing off).
func NewTracer(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{tracer: tp.Tracer(ReservationScope)}
}

// StartBatch starts the span of one coalesced batch: the claim, the lock
// and the write spans of the batch become its children when the batch
// runs on the returned context. A batch serves many requests, and each
// request has its own trace, so the span cannot be the child of them all:
// it starts a trace of its own (the leader's request does not own the work
// either) and links to the span of every request in reqs, and each
// request's span gets a link back (see Joined), which is how a trace
// viewer goes from an order to the batch that placed it and back.
// Requests that carry no span (an invalid SpanContext) get no link; the
// SDK keeps at most OTEL_SPAN_LINK_COUNT_LIMIT links (128 by default),
// more than a batch holds. The caller ends the span.
func (t *Tracer) StartBatch(ctx context.Context, reqs []trace.SpanContext, orders int) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noop.Span{}
	}
	links := make([]trace.Link, 0, len(reqs))
	for _, sc := range reqs {
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return t.tracer.Start(ctx, BatchSpan, trace.WithNewRoot(), trace.WithLinks(links...),
		trace.WithAttributes(AttrBatchOrders.Int(orders), AttrBatchRequests.Int(len(links))))
}

// Joined links the span of the request whose context is req to batch, the
// span StartBatch returned: the request's own trace then shows which batch
// it went into. It does nothing when either has no span.
func Joined(req context.Context, batch trace.Span) {
	sc := batch.SpanContext()
	if !sc.IsValid() {
		return
	}
	trace.SpanFromContext(req).AddLink(trace.Link{SpanContext: sc})
}

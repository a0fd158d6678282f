// Package locktrace is a lock.Locker that wraps any backend and makes a
// span of every acquisition and release, so a trace shows where an order's
// time went waiting for its locks. It is installed only when tracing is on:
// with tracing off the service uses the backend itself.
package locktrace

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/lockmetrics"
)

// Scope is the instrumentation scope of the lock spans.
const Scope = "github.com/stockguard/stockguard/internal/lock/locktrace"

// Span names.
const (
	SpanAcquire      = "lock.acquire"
	SpanAcquireBatch = "lock.acquire_batch"
	SpanRelease      = "lock.release"
)

// Attribute keys of the lock spans.
const (
	AttrBackend = attribute.Key("lock.backend")
	// AttrKey is the key of a one-key span.
	AttrKey = attribute.Key("lock.key")
	// AttrKeys is how many keys the call asked for (or released).
	AttrKeys = attribute.Key("lock.keys")
	// AttrObtained is how many of them it obtained.
	AttrObtained = attribute.Key("lock.obtained")
	// AttrHeld is how many a batch found held elsewhere.
	AttrHeld = attribute.Key("lock.held")
	// AttrReleased is how many leases a handover let go of in the round of
	// its batch (lock.HandoverBatch).
	AttrReleased = attribute.Key("lock.released")
	// AttrToken is the fencing token of a one-key lease; AttrTokens those
	// of a batch's leases, in key order.
	AttrToken  = attribute.Key("lock.fencing_token")
	AttrTokens = attribute.Key("lock.fencing_tokens")
	// AttrReason is lockmetrics.Reason of a failed acquisition, the same
	// value as the failures metric's reason label.
	AttrReason = attribute.Key("lock.failure_reason")
)

// Wrap returns l with spans on tp. The result is a lock.MultiAcquirer
// exactly when l is one, and a lock.Handover exactly when l is one, so
// callers that type-assert on either take the same path as without the
// wrapper: tracing an instance must not change what it does. Leases it
// returns are the backend's, seen through a lease of the wrapper's (see
// wrapLease).
func Wrap(l lock.Locker, tp trace.TracerProvider) lock.Locker {
	t := &Locker{inner: l, tracer: tp.Tracer(Scope), backend: AttrBackend.String(l.Name())}
	t.rel = &releaser{t: t}
	m, multi := l.(lock.MultiAcquirer)
	_, hands := l.(lock.Handover)
	switch {
	case multi && hands:
		return &multiHandoverLocker{multiLocker: &multiLocker{Locker: t, multi: m}, handover: handover{t}}
	case multi:
		return &multiLocker{Locker: t, multi: m}
	case hands:
		return &handoverLocker{Locker: t, handover: handover{t}}
	}
	return t
}

// Locker is the decorator of a backend without a multi-key form of its own.
type Locker struct {
	inner   lock.Locker
	tracer  trace.Tracer
	backend attribute.KeyValue
	rel     *releaser
}

// multiLocker is the decorator of a backend that is a lock.MultiAcquirer.
type multiLocker struct {
	*Locker
	multi lock.MultiAcquirer
}

// handover is the lock.Handover of the decorator of a backend that is one.
type handover struct{ t *Locker }

type handoverLocker struct {
	*Locker
	handover
}

type multiHandoverLocker struct {
	*multiLocker
	handover
}

// HandoverBatch implements lock.Handover with the backend's own, under one
// acquire_batch span that also counts the leases let go of. prev are the
// wrapper's handles: the backend's leases behind them go to the backend's
// handover, any other handle is released on its own.
func (h handover) HandoverBatch(ctx context.Context, prev []lock.Handle, keys []string, opts ...lock.Option) (lock.Batch, error, error) {
	t := h.t
	ctx, span := t.tracer.Start(ctx, SpanAcquireBatch, trace.WithAttributes(t.backend,
		AttrKeys.Int(len(keys)), AttrReleased.Int(len(prev))))
	defer span.End()
	var inner lock.Set
	var others []lock.Handle
	for _, ph := range prev {
		if wh, ok := ph.(*handle); ok && wh.t == t {
			inner = append(inner, wh.inner)
			continue
		}
		others = append(others, ph)
	}
	b, released, err := lock.HandoverBatch(ctx, t.inner, inner, keys, opts...)
	if len(others) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		released = errors.Join(released, lock.ReleaseHandles(rctx, others))
		cancel()
	}
	if released != nil {
		span.RecordError(released)
	}
	if err != nil {
		failed(ctx, span, err)
		return lock.Batch{}, released, err
	}
	return t.obtained(span, b), released, nil
}

// Acquire implements lock.Locker.
func (t *Locker) Acquire(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	ctx, span := t.tracer.Start(ctx, SpanAcquire, trace.WithAttributes(t.backend, AttrKey.String(key), AttrKeys.Int(1)))
	defer span.End()
	l, err := t.inner.Acquire(ctx, key, opts...)
	if err != nil {
		failed(ctx, span, err)
		return nil, err
	}
	span.SetAttributes(AttrObtained.Int(1), AttrToken.Int64(int64(l.Token())))
	return t.wrapLease(l), nil
}

// AcquireBatch implements lock.Locker.
func (t *Locker) AcquireBatch(ctx context.Context, keys []string, opts ...lock.Option) (lock.Batch, error) {
	ctx, span := t.tracer.Start(ctx, SpanAcquireBatch, trace.WithAttributes(t.backend, AttrKeys.Int(len(keys))))
	defer span.End()
	b, err := t.inner.AcquireBatch(ctx, keys, opts...)
	if err != nil {
		failed(ctx, span, err)
		return lock.Batch{}, err
	}
	return t.obtained(span, b), nil
}

// AcquireAll implements lock.MultiAcquirer with the backend's own.
func (m *multiLocker) AcquireAll(ctx context.Context, keys []string, opts ...lock.Option) (lock.Set, error) {
	ctx, span := m.tracer.Start(ctx, SpanAcquire, trace.WithAttributes(m.backend, AttrKeys.Int(len(keys))))
	defer span.End()
	s, err := m.multi.AcquireAll(ctx, keys, opts...)
	if err != nil {
		failed(ctx, span, err)
		return nil, err
	}
	span.SetAttributes(AttrObtained.Int(len(s)), AttrTokens.Int64Slice(tokens(s)))
	return m.wrapSet(s), nil
}

// Name implements lock.Locker.
func (t *Locker) Name() string { return t.inner.Name() }

// Fenced implements lock.Locker.
func (t *Locker) Fenced() bool { return t.inner.Fenced() }

// Ping implements lock.Locker. It makes no span: readiness probes call it
// every few seconds and a trace of each would only be noise.
func (t *Locker) Ping(ctx context.Context) error { return t.inner.Ping(ctx) }

// Close implements lock.Locker.
func (t *Locker) Close() error { return t.inner.Close() }

// failed records err on span. A key held elsewhere, found by a try-once
// acquisition, is an answer rather than a fault (a batch reports such keys
// without an error at all), so it does not mark the span as failed; a wait
// cut short by the caller's deadline does.
func failed(ctx context.Context, span trace.Span, err error) {
	reason := lockmetrics.Reason(err)
	span.SetAttributes(AttrReason.String(reason))
	span.RecordError(err)
	if reason != lockmetrics.ReasonNotAcquired || ctx.Err() != nil {
		span.SetStatus(codes.Error, reason)
	}
}

// obtained records what a batch got on span and wraps its leases.
func (t *Locker) obtained(span trace.Span, b lock.Batch) lock.Batch {
	span.SetAttributes(AttrObtained.Int(len(b.Leases)), AttrHeld.Int(len(b.Held)), AttrTokens.Int64Slice(tokens(b.Leases)))
	b.Leases = t.wrapSet(b.Leases)
	return b
}

func tokens(s lock.Set) []int64 {
	ts := make([]int64, len(s))
	for i, l := range s {
		ts[i] = int64(l.Token())
	}
	return ts
}

// Package locktrace is a lock.Locker that wraps any backend and makes a
// span of every acquisition and release, so a trace shows where an order's
// time went waiting for its locks. It is installed only when tracing is on:
// with tracing off the service uses the backend itself.
package locktrace

import (
	"context"

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
	// AttrToken is the fencing token of a one-key lease; AttrTokens those
	// of a batch's leases, in key order.
	AttrToken  = attribute.Key("lock.fencing_token")
	AttrTokens = attribute.Key("lock.fencing_tokens")
	// AttrReason is lockmetrics.Reason of a failed acquisition, the same
	// value as the failures metric's reason label.
	AttrReason = attribute.Key("lock.failure_reason")
)

// Wrap returns l with spans on tp. The result is a lock.MultiAcquirer
// exactly when l is one, so callers that type-assert on it take the same
// path as without the wrapper. Leases it returns are the backend's, seen
// through a lease of the wrapper's (see wrapLease).
func Wrap(l lock.Locker, tp trace.TracerProvider) lock.Locker {
	t := &Locker{inner: l, tracer: tp.Tracer(Scope), backend: AttrBackend.String(l.Name())}
	t.rel = &releaser{t: t}
	if m, ok := l.(lock.MultiAcquirer); ok {
		return &multiLocker{Locker: t, multi: m}
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
	span.SetAttributes(AttrObtained.Int(len(b.Leases)), AttrHeld.Int(len(b.Held)), AttrTokens.Int64Slice(tokens(b.Leases)))
	b.Leases = t.wrapSet(b.Leases)
	return b, nil
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

func tokens(s lock.Set) []int64 {
	ts := make([]int64, len(s))
	for i, l := range s {
		ts[i] = int64(l.Token())
	}
	return ts
}

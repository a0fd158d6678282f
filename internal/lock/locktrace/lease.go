package locktrace

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockguard/stockguard/internal/lock"
)

// wrapLease returns a lease with in's key, token, id and deadline whose
// release goes through a span, and which ends when in ends, with in's
// cause: a lost backend lease is a lost wrapper lease at once. A
// lock.Lease's release is its handle's, which only its backend sets, so the
// wrapper's own lease is the one place a release can be seen.
//
// The wrapper's lease has no keepalive of its own: in's keepalive goes on
// extending in, and the wrapper's Deadline reads in's (Follows), so that
// tracing an instance does not turn an expiring lease into one that
// reports no deadline.
func (t *Locker) wrapLease(in *lock.Lease) *lock.Lease {
	out, lose := lock.NewLease(lock.LeaseParams{Key: in.Key(), Token: in.Token(), ID: in.ID(),
		Handle: &handle{inner: in, t: t}, Follows: in})
	// ictx ends when in does; once out is released first (its Release
	// releases in), lose is a no-op, so no cancel is needed: the callback
	// runs once, when in ends, which every lease eventually does.
	ictx, _ := in.Context(context.Background())
	context.AfterFunc(ictx, func() { lose(context.Cause(ictx)) })
	return out
}

func (t *Locker) wrapSet(s lock.Set) lock.Set {
	out := make(lock.Set, len(s))
	for i, l := range s {
		out[i] = t.wrapLease(l)
	}
	return out
}

// handle releases the backend's lease under a span. It is a
// lock.BatchHandle so that a Set of wrapper leases is still released in
// one round per lock server: Set.Release hands them all to one
// releaser.ReleaseBatch, which releases the backend leases as a Set.
type handle struct {
	inner *lock.Lease
	t     *Locker
}

// Release implements lock.Handle.
func (h *handle) Release(ctx context.Context) error {
	ctx, span := h.t.tracer.Start(ctx, SpanRelease, trace.WithAttributes(h.t.backend, AttrKey.String(h.inner.Key()),
		AttrKeys.Int(1), AttrToken.Int64(int64(h.inner.Token()))))
	defer span.End()
	err := h.inner.Release(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "release failed")
	}
	return err
}

// Releaser implements lock.BatchHandle.
func (h *handle) Releaser() lock.BatchReleaser { return h.t.rel }

// releaser releases the leases of one wrapper together.
type releaser struct {
	t *Locker
}

// ReleaseBatch implements lock.BatchReleaser.
func (r *releaser) ReleaseBatch(ctx context.Context, hs []lock.Handle) error {
	set := make(lock.Set, len(hs))
	for i, h := range hs {
		set[i] = h.(*handle).inner
	}
	ctx, span := r.t.tracer.Start(ctx, SpanRelease, trace.WithAttributes(r.t.backend, AttrKeys.Int(len(set)),
		AttrTokens.Int64Slice(tokens(set))))
	defer span.End()
	err := set.Release(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "release failed")
	}
	return err
}

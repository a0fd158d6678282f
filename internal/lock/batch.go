package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Batch is what one AcquireBatch obtained: a lease for every key it got,
// exactly as if each had been acquired alone (own token, id and validity),
// and the keys another holder has. Both are in key order.
type Batch struct {
	Leases Set
	Held   []string
}

// BatchKeys returns keys sorted, without duplicates, or ErrInvalidKey if one
// is empty. Backends call it first so that every batch form agrees on order.
func BatchKeys(keys []string) ([]string, error) {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	if len(sorted) > 0 && sorted[0] == "" {
		return nil, ErrInvalidKey
	}
	return sorted, nil
}

// EachOnce is the batch form for backends that have no cheaper one: a
// TryOnce acquisition per key, in key order. In-process backends use it
// (a round is a map lookup); a networked backend should not.
//
// A key whose try answers ErrNotAcquired after ctx has ended is not
// reported held: the batch fails with ctx's error, as a batch whose ctx is
// done does (see Locker.AcquireBatch), whichever key that try was. After
// the deadline ErrNotAcquired may also mean the try was refused until
// then, which says nothing of a holder.
func EachOnce(ctx context.Context, l Locker, keys []string, opts ...Option) (Batch, error) {
	sorted, err := BatchKeys(keys)
	if err != nil {
		return Batch{}, fmt.Errorf("%s: %w", l.Name(), err)
	}
	opts = append(slices.Clip(opts), TryOnce())
	var b Batch
	for _, k := range sorted {
		lease, err := l.Acquire(ctx, k, opts...)
		switch {
		case err == nil:
			b.Leases = append(b.Leases, lease)
		case errors.Is(err, ErrNotAcquired) && ctx.Err() == nil:
			b.Held = append(b.Held, k)
		default:
			return Batch{}, errors.Join(withCtxErr(ctx, err), b.Leases.releaseDetached(ctx))
		}
	}
	return b, nil
}

// releaseDetached releases s on a context that outlives ctx: a failed or
// cancelled batch must leave nothing behind, and the caller's context may be
// the reason it failed.
func (s Set) releaseDetached(ctx context.Context) error {
	if len(s) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	return s.Release(rctx)
}

// BatchHandle is a Handle whose backend can release it together with other
// handles of the same backend, in one round per lock server: Set.Release
// passes every handle of the set that has the same Releaser to one
// ReleaseBatch call instead of calling Release on each.
type BatchHandle interface {
	Handle
	// Releaser is the value that releases this handle with its peers; it
	// must be comparable (a pointer) and the same for every handle one
	// ReleaseBatch may take together.
	Releaser() BatchReleaser
}

// BatchReleaser releases handles of one backend together. hs are handles
// whose Releaser it is, each released at most once, as Release would.
type BatchReleaser interface {
	ReleaseBatch(ctx context.Context, hs []Handle) error
}

// release releases every lease of s: those with a BatchHandle grouped by
// Releaser, one call per group, the others one by one in reverse order.
// Every lease is detached (its keepalive stopped) before its backend call,
// as Lease.Release does.
func (s Set) release(ctx context.Context) error {
	hs, keys := s.detach()
	return releaseHandles(ctx, hs, keys)
}

// detach detaches every lease of s not released before, in reverse order,
// and returns their handles and keys.
func (s Set) detach() (hs []Handle, keys []string) {
	for i := len(s) - 1; i >= 0; i-- {
		if h := s[i].detach(); h != nil {
			hs, keys = append(hs, h), append(keys, s[i].Key())
		}
	}
	return hs, keys
}

// ReleaseHandles releases detached handles as Set.Release releases leases:
// those that are BatchHandles grouped by Releaser, one call per group, the
// others one by one. A Handover calls it for the handles of prev it cannot
// let go of in its own round.
func ReleaseHandles(ctx context.Context, hs []Handle) error { return releaseHandles(ctx, hs, nil) }

// releaseHandles is ReleaseHandles; keys[i], when keys is not nil, is
// hs[i]'s key, for the errors.
func releaseHandles(ctx context.Context, hs []Handle, keys []string) error {
	var errs []error
	groups := make(map[BatchReleaser][]Handle)
	var order []BatchReleaser
	for i, h := range hs {
		if bh, ok := h.(BatchHandle); ok {
			r := bh.Releaser()
			if _, seen := groups[r]; !seen {
				order = append(order, r)
			}
			groups[r] = append(groups[r], h)
			continue
		}
		if err := h.Release(ctx); err != nil {
			if keys != nil {
				err = fmt.Errorf("%q: %w", keys[i], err)
			}
			errs = append(errs, fmt.Errorf("lock: release %w", err))
		}
	}
	for _, r := range order {
		if err := r.ReleaseBatch(ctx, groups[r]); err != nil {
			errs = append(errs, fmt.Errorf("lock: release %d leases: %w", len(groups[r]), err))
		}
	}
	return errors.Join(errs...)
}

// Handover is implemented by backends that can release leases of theirs in
// the same round per lock server as their next batch acquisition, where
// that saves work the servers pay per round (zookeeper: one multi deletes
// the old nodes and creates the new, one transaction the ensemble agrees on
// instead of two). Redis' script calls cost per key far more than per call:
// folding the release into the acquire script was measured no cheaper.
//
// Its HandoverBatch has the contract of the function HandoverBatch, which
// calls it with prev's leases already detached and with no key of prev in
// keys; a handle of prev that is not the backend's own it releases on its
// own.
type Handover interface {
	HandoverBatch(ctx context.Context, prev []Handle, keys []string, opts ...Option) (b Batch, released, err error)
}

// HandoverBatch releases prev and tries keys once, as prev.Release followed
// by l.AcquireBatch would, but where l is a Handover in one round per lock
// server for both: a batch that follows another pays no round of its own to
// let the other's keys go. prev is released whatever becomes of the try,
// even when ctx is done; released is that release's error (the keys it
// could not reach stay held until their TTL), err the try's, with
// AcquireBatch's meaning. A key of prev that is also in keys is reported
// held: the key goes to whoever waits in its line, not back to the caller
// that let it go.
func HandoverBatch(ctx context.Context, l Locker, prev Set, keys []string, opts ...Option) (b Batch, released, err error) {
	hs, prevKeys := prev.detach()
	var back []string
	if len(prevKeys) > 0 {
		keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool {
			if slices.Contains(prevKeys, k) {
				back = append(back, k)
				return true
			}
			return false
		})
	}
	if h, ok := l.(Handover); ok {
		b, released, err = h.HandoverBatch(ctx, hs, keys, opts...)
	} else {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		released = releaseHandles(rctx, hs, prevKeys)
		cancel()
		b, err = l.AcquireBatch(ctx, keys, opts...)
	}
	if err != nil {
		return Batch{}, released, err
	}
	if len(back) > 0 {
		back, _ = BatchKeys(back)
		b.Held = slices.Sorted(slices.Values(append(b.Held, back...)))
	}
	return b, released, nil
}

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
			return Batch{}, errors.Join(err, b.Leases.releaseDetached(ctx))
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
	var errs []error
	groups := make(map[BatchReleaser][]Handle)
	var order []BatchReleaser
	for i := len(s) - 1; i >= 0; i-- {
		h := s[i].detach()
		if h == nil {
			continue
		}
		if bh, ok := h.(BatchHandle); ok {
			r := bh.Releaser()
			if _, seen := groups[r]; !seen {
				order = append(order, r)
			}
			groups[r] = append(groups[r], h)
			continue
		}
		if err := h.Release(ctx); err != nil {
			errs = append(errs, fmt.Errorf("lock: release %q: %w", s[i].Key(), err))
		}
	}
	for _, r := range order {
		if err := r.ReleaseBatch(ctx, groups[r]); err != nil {
			errs = append(errs, fmt.Errorf("lock: release %d leases: %w", len(groups[r]), err))
		}
	}
	return errors.Join(errs...)
}

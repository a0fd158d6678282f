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

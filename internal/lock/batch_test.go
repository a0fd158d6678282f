package lock

import (
	"context"
	"errors"
	"testing"
)

type plainHandle struct{ released *int }

func (h plainHandle) Release(context.Context) error { *h.released++; return nil }

type groupHandle struct{ r *groupReleaser }

func (h groupHandle) Release(context.Context) error { return errors.New("released alone") }

func (h groupHandle) Releaser() BatchReleaser { return h.r }

type groupReleaser struct{ calls, handles int }

func (r *groupReleaser) ReleaseBatch(_ context.Context, hs []Handle) error {
	r.calls++
	r.handles += len(hs)
	return nil
}

// TestSetReleaseGroups: leases whose handles share a Releaser are released
// by one ReleaseBatch call per Releaser, each once; the others one by one.
func TestSetReleaseGroups(t *testing.T) {
	r1, r2 := &groupReleaser{}, &groupReleaser{}
	plain := 0
	var s Set
	for _, h := range []Handle{groupHandle{r1}, plainHandle{&plain}, groupHandle{r2}, groupHandle{r1}, groupHandle{r1}} {
		l, _ := NewLease(LeaseParams{Key: "k", Handle: h})
		s = append(s, l)
	}
	if err := s.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r1.calls != 1 || r1.handles != 3 || r2.calls != 1 || r2.handles != 1 || plain != 1 {
		t.Fatalf("r1 %d calls for %d, r2 %d calls for %d, plain %d; want 1/3, 1/1, 1", r1.calls, r1.handles, r2.calls, r2.handles, plain)
	}
	for _, l := range s {
		if !errors.Is(l.Err(), ErrReleased) {
			t.Errorf("lease Err %v after Set.Release", l.Err())
		}
	}
	if err := s.Release(context.Background()); err != nil || r1.calls != 1 || plain != 1 {
		t.Fatalf("second Release = %v, r1 %d calls, plain %d; want nothing released twice", err, r1.calls, plain)
	}
}

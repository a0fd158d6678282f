package postgres_test

import (
	"context"
	"maps"
	"testing"
)

// TestKnownSKUs: the lookup names exactly the rows that exist, and a claim
// with create is what makes a name known.
func TestKnownSKUs(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	mustStock(t, s, "k-1", 3, 1)
	mustStock(t, s, "k-2", 0, 1)
	got, err := s.KnownSKUs(ctx, []string{"k-1", "k-missing", "k-2", "k-1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"k-1": true, "k-2": true}; !maps.Equal(got, want) {
		t.Fatalf("KnownSKUs = %v, want %v", got, want)
	}
	if got, err := s.KnownSKUs(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("KnownSKUs(nil) = %v, %v; want nothing", got, err)
	}
}

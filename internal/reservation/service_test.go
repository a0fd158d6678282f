package reservation_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // the child below runs in Asia/Tokyo, tzdata installed or not

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/inventory"
	"github.com/stockguard/stockguard/internal/reservation"
)

// TestOrderIDsAreTimeOrdered: ids are version 7 UUIDs, so each order's row
// lands at the right edge of the orders' primary key index.
func TestOrderIDsAreTimeOrdered(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	f.stock("a", 10)
	var last []byte
	for range 5 {
		o, _, err := f.svc.Place(context.Background(), req("", line("a", 1)))
		if err != nil {
			t.Fatal(err)
		}
		if v := o.ID.Version(); v != 7 {
			t.Fatalf("order id %s is version %d, want 7", o.ID, v)
		}
		if last != nil && bytes.Compare(o.ID[:], last) <= 0 {
			t.Fatalf("order id %s not after the previous %x", o.ID, last)
		}
		last = o.ID[:]
	}
}

// TestLoneOrderStartsNoGoroutine: with coalescing off, an order runs the
// critical section on its request's goroutine and starts no other one,
// which would be one per order: its claim ends once every lease is lost
// through callbacks on the leases. A goroutine carries the profiler labels
// of the one that started it, so the order's are those with its label.
func TestLoneOrderStartsNoGoroutine(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{Disabled: true})
	f.stock("a", 10) // seen, so no lookup
	during := -1
	f.store.mu.Lock()
	f.store.beforeClaim = func([]inventory.Fence) { during = labelled(t, "order", t.Name()) }
	f.store.mu.Unlock()
	pprof.Do(context.Background(), pprof.Labels("order", t.Name()), func(ctx context.Context) {
		if _, _, err := f.svc.Place(ctx, req("", line("a", 1))); err != nil {
			t.Fatal(err)
		}
	})
	if during != 1 {
		t.Errorf("%d goroutines of the order during its claim, want 1: its own", during)
	}
}

// labelled counts the goroutines with the profiler label key=value.
func labelled(t *testing.T, key, value string) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	// debug=1: a line "<count> @ <pcs>" per stack and set of labels,
	// followed by "# labels: {...}" if it has any.
	want := fmt.Sprintf("%q:%q", key, value)
	n, count := 0, 0
	for ln := range strings.Lines(buf.String()) {
		if c, _, ok := strings.Cut(ln, " @ "); ok {
			count, _ = strconv.Atoi(c)
		} else if strings.HasPrefix(ln, "# labels: ") && strings.Contains(ln, want) {
			n += count
		}
	}
	return n
}

// lateWrite is the real store with one write whose answer is lost
// (ErrOutcomeUnknown, as when the connection breaks while the statement
// runs) and which commits a moment later: right after the service's
// read-back of the order has looked, as a statement still running when its
// client's connection broke does.
type lateWrite struct {
	inventory.Store
	armed atomic.Bool
	mu    sync.Mutex
	// late is the write whose answer was lost, landed by the next read.
	late func() error
}

func (s *lateWrite) Write(ctx context.Context, fences []inventory.Fence, w inventory.Write) error {
	if len(w.Orders) == 0 || !s.armed.CompareAndSwap(true, false) {
		return s.Store.Write(ctx, fences, w)
	}
	s.mu.Lock()
	s.late = func() error { return s.Store.Write(context.Background(), fences, w) }
	s.mu.Unlock()
	return fmt.Errorf("fake store: write: connection reset: %w: %w", inventory.ErrStoreUnavailable, inventory.ErrOutcomeUnknown)
}

// Order reads, then lands the lost write: the read-back has looked, and
// missed it. In this goroutine, so that no scheduling can reorder the two.
func (s *lateWrite) Order(ctx context.Context, id uuid.UUID) (*inventory.Order, error) {
	o, err := s.Store.Order(ctx, id)
	s.mu.Lock()
	late := s.late
	s.late = nil
	s.mu.Unlock()
	if late != nil {
		if werr := late(); werr != nil {
			return nil, werr
		}
	}
	return o, err
}

// TestOwnOrderLandingLateIsNoReplay: a keyed order sent once, whose write's
// answer was lost and which committed only after the read-back looked, is
// found holding its key; it is this request's own order, answered as new,
// not as the replay of an earlier request (a client skips the follow-up of
// a replay: payment, mail). A retry then replays it.
func TestOwnOrderLandingLateIsNoReplay(t *testing.T) {
	for _, c := range []reservation.Coalescing{{}, {Disabled: true}} {
		t.Run(fmt.Sprintf("disabled=%v", c.Disabled), func(t *testing.T) {
			f := newFixture(t, c)
			ctx := context.Background()
			f.stock("a", 10)
			late := &lateWrite{Store: f.store.Store}
			late.armed.Store(true)
			f.store.Store = late
			o, replayed, err := f.svc.Place(ctx, req("k-1", line("a", 1)))
			if err != nil || replayed {
				t.Fatalf("the only request with its key, landed late = %+v, replayed %v, %v; want its order, not replayed", o, replayed, err)
			}
			if late.armed.Load() {
				t.Fatal("the write was never cut off: the test proved nothing")
			}
			stored, err := f.svc.Order(ctx, o.ID.String())
			if err != nil || stored.Status != inventory.StatusReserved {
				t.Fatalf("order %s = %+v, %v; want it stored, reserved", o.ID, stored, err)
			}
			again, replayed, err := f.svc.Place(ctx, req("k-1", line("a", 1)))
			if err != nil || !replayed || again.ID != o.ID {
				t.Fatalf("retry = %+v, replayed %v, %v; want a replay of %s", again, replayed, err, o.ID)
			}
			if a := f.audit("a"); !a.Consistent || a.Held != 1 {
				t.Fatalf("audit = %+v, want 1 held", a)
			}
		})
	}
}

// TestAnswersInUTC: an order reads the same from every instance, whatever
// the process's time zone: as placed, replayed and read back, its times are
// in UTC, so the JSON the API renders is byte for byte the first answer.
func TestAnswersInUTC(t *testing.T) {
	// In a child whose zone is UTC+9 from its start: setting time.Local in
	// the test would race with every goroutine that reads it (pgx's).
	if os.Getenv("STOCKGUARD_TEST_TZ_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAnswersInUTC$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TZ=Asia/Tokyo", "STOCKGUARD_TEST_TZ_CHILD=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("with TZ=Asia/Tokyo: %v\n%s", err, out)
		}
		return
	}
	if _, off := time.Now().Zone(); off != 9*60*60 {
		t.Fatalf("TZ=Asia/Tokyo not in effect: %s", time.Local)
	}
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 10)
	placed, _, err := f.svc.Place(ctx, req("k-1", line("a", 1)))
	if err != nil {
		t.Fatal(err)
	}
	replayed, _, err := f.svc.Place(ctx, req("k-1", line("a", 1)))
	if err != nil {
		t.Fatal(err)
	}
	read, err := f.svc.Order(ctx, placed.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	first := answer(t, placed)
	if !strings.HasSuffix(first["expires_at"].(string), "Z") {
		t.Fatalf("placed with time.Local %s: expires_at %q, want UTC", time.Local, first["expires_at"])
	}
	for what, o := range map[string]*inventory.Order{"replayed": replayed, "read back": read} {
		if got := answer(t, o); got["expires_at"] != first["expires_at"] {
			t.Errorf("%s: expires_at %q, want the first answer's %q", what, got["expires_at"], first["expires_at"])
		}
	}
	for what, at := range map[string]time.Time{"placed": placed.CreatedAt, "read back": read.CreatedAt} {
		if at.Location() != time.UTC {
			t.Errorf("%s: created_at in %s, want UTC", what, at.Location())
		}
	}
}

// answer is o as the API renders it.
func answer(t *testing.T, o *inventory.Order) map[string]any {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestKeysWithArrayLiteralCharacters: keys with the characters an array
// literal quotes or escapes, or reads as NULL, are written, found and
// replayed as themselves.
func TestKeysWithArrayLiteralCharacters(t *testing.T) {
	f := newFixture(t, reservation.Coalescing{})
	ctx := context.Background()
	f.stock("a", 100)
	for _, k := range []string{`"`, `\`, `{}`, `NULL`, `a,b`, `a b`, `'`, `%`, `_`, `$1`, `~!`} {
		first, replayed, err := f.svc.Place(ctx, req(k, line("a", 1)))
		if err != nil || replayed {
			t.Fatalf("key %q: first = %+v, replayed %v, %v", k, first, replayed, err)
		}
		again, replayed, err := f.svc.Place(ctx, req(k, line("a", 1)))
		if err != nil || !replayed || again.ID != first.ID {
			t.Fatalf("key %q: repeat = %+v, replayed %v, %v; want a replay of %s", k, again, replayed, err, first.ID)
		}
		if _, _, err := f.svc.Place(ctx, req(k, line("a", 2))); !errors.Is(err, inventory.ErrIdempotencyReused) {
			t.Fatalf("key %q with another order = %v, want ErrIdempotencyReused", k, err)
		}
	}
}

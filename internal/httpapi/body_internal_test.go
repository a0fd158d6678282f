package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/iotest"

	"github.com/gin-gonic/gin"
)

// TestServerWriterIsNetHTTPs: a body past the limit is cut by a
// MaxBytesReader on net/http's own writer, not gin's wrapper, since only
// through it does net/http learn of the limit (requestTooLarge) and close
// with a lingering FIN rather than a reset that can lose the 413.
func TestServerWriterIsNetHTTPs(t *testing.T) {
	var want, got http.ResponseWriter
	r := gin.New()
	r.GET("/", func(c *gin.Context) { got = serverWriter(c.Writer) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		want = w
		r.ServeHTTP(w, req)
	}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if got != want || fmt.Sprintf("%T", got) != "*http.response" {
		t.Fatalf("serverWriter = %T, want net/http's %T", got, want)
	}
}

// TestReadAllTakesWhatItHolds: readAll holds of the budget the size of the
// buffer a body ends in, taken step by step as the bytes come, never the
// declared length up front, a buffer over smallBody in the large tier
// too; and fails errBodyOverloaded, having taken no more than is left,
// when the next step does not fit either bound.
func TestReadAllTakesWhatItHolds(t *testing.T) {
	cases := []struct {
		name       string
		size       int
		chunked    bool
		max, large int64 // the budget's bounds
		wantHeld   int   // the buffer's size
		wantErr    error
	}{
		{"an order", 40, false, maxBuffered, maxLarge, bodyStep, nil},
		{"empty", 0, false, maxBuffered, maxLarge, 0, nil},
		{"a step and a byte", bodyStep + 1, false, maxBuffered, maxLarge, bodyStep + 1, nil},
		{"40 KB, declared", 40_000, false, maxBuffered, maxLarge, 40_000, nil},
		{"64 KiB, declared", maxBody, false, maxBuffered, maxLarge, maxBody, nil},
		{"40 KB, chunked", 40_000, true, maxBuffered, maxLarge, 64 << 10, nil},
		{"64 KiB, chunked", maxBody, true, maxBuffered, maxLarge, maxBody + 1, nil},
		{"over 64 KiB, chunked", maxBody + 1, true, maxBuffered, maxLarge, maxBody + 1, errBodyTooLarge},
		{"past the budget", 40_000, false, 20_000, 20_000, 16 << 10, errBodyOverloaded},
		{"past the large tier", 40_000, false, maxBuffered, 10_000, 8 << 10, errBodyOverloaded},
		{"small, the large tier spent", smallBody, false, maxBuffered, 0, smallBody, nil},
		{"a byte over small, the large tier spent", smallBody + 1, false, maxBuffered, 0, smallBody, errBodyOverloaded},
		{"no first step left", 40, false, bodyStep - 1, maxLarge, 0, errBodyOverloaded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sent := bytes.Repeat([]byte{' '}, tc.size)
			r := httptest.NewRequest(http.MethodPost, "/", iotest.OneByteReader(bytes.NewReader(sent)))
			r.ContentLength = int64(tc.size)
			if tc.chunked {
				r.ContentLength = -1
			}
			budget := &bodyBudget{max: tc.max, maxLarge: tc.large}
			var held int64
			body, err := readAll(httptest.NewRecorder(), r, make([]byte, 0, bodyStep), budget, &held)
			if tc.wantErr != nil {
				if got := bodyError(err); !errors.Is(got, tc.wantErr) {
					t.Fatalf("err = %v (told %v), want %v", err, got, tc.wantErr)
				}
			} else if err != nil || !bytes.Equal(body, sent) {
				t.Fatalf("read %d of %d bytes: %v", len(body), len(sent), err)
			}
			if held != int64(tc.wantHeld) || budget.used != held || budget.large != largePart(held) {
				t.Fatalf("held %d (budget used %d, large %d, of %d and %d), want the %d bytes of its buffer",
					held, budget.used, budget.large, tc.max, tc.large, tc.wantHeld)
			}
			budget.give(held)
			if budget.used != 0 || budget.large != 0 {
				t.Fatalf("given back, the budget holds %d (large %d)", budget.used, budget.large)
			}
		})
	}
}

// panicReader sends n bytes, then panics.
type panicReader struct{ n int }

func (p *panicReader) Read(b []byte) (int, error) {
	if p.n == 0 {
		panic("body reader")
	}
	b[0] = ' '
	p.n--
	return 1, nil
}

// TestReadAllPanicLeavesWhatItHeldKnown: a panic while reading a body
// leaves in *held all readAll took of the budget, which readBody's
// deferred give then returns; were it only in readAll's results, every
// panic would shrink the budget for good.
func TestReadAllPanicLeavesWhatItHeldKnown(t *testing.T) {
	budget := &bodyBudget{max: maxBuffered, maxLarge: maxLarge}
	var held int64
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("readAll did not panic")
			}
		}()
		r := httptest.NewRequest(http.MethodPost, "/", &panicReader{n: 5000})
		r.ContentLength = 10_000
		_, _ = readAll(httptest.NewRecorder(), r, make([]byte, 0, bodyStep), budget, &held)
	}()
	if held != 8<<10 || budget.used != held || budget.large != held {
		t.Fatalf("after a panic at 5,000 bytes, held %d, budget used %d (large %d); want the 8 KiB buffer in all three",
			held, budget.used, budget.large)
	}
	budget.give(held)
	if budget.used != 0 || budget.large != 0 {
		t.Fatalf("given back, the budget holds %d (large %d)", budget.used, budget.large)
	}
}

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
// declared length up front, and fails errBodyOverloaded, having taken no
// more than is left, when the next step does not fit.
func TestReadAllTakesWhatItHolds(t *testing.T) {
	cases := []struct {
		name     string
		size     int
		chunked  bool
		budget   int64
		wantHeld int // the buffer's size
		wantErr  error
	}{
		{"an order", 40, false, maxBuffered, bodyStep, nil},
		{"empty", 0, false, maxBuffered, 0, nil},
		{"a step and a byte", bodyStep + 1, false, maxBuffered, bodyStep + 1, nil},
		{"40 KB, declared", 40_000, false, maxBuffered, 40_000, nil},
		{"64 KiB, declared", maxBody, false, maxBuffered, maxBody, nil},
		{"40 KB, chunked", 40_000, true, maxBuffered, 64 << 10, nil},
		{"64 KiB, chunked", maxBody, true, maxBuffered, maxBody + 1, nil},
		{"over 64 KiB, chunked", maxBody + 1, true, maxBuffered, maxBody + 1, errBodyTooLarge},
		{"past the budget", 40_000, false, 20_000, 16 << 10, errBodyOverloaded},
		{"no first step left", 40, false, bodyStep - 1, 0, errBodyOverloaded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sent := bytes.Repeat([]byte{' '}, tc.size)
			r := httptest.NewRequest(http.MethodPost, "/", iotest.OneByteReader(bytes.NewReader(sent)))
			r.ContentLength = int64(tc.size)
			if tc.chunked {
				r.ContentLength = -1
			}
			budget := &bodyBudget{max: tc.budget}
			body, taken, err := readAll(httptest.NewRecorder(), r, make([]byte, 0, bodyStep), budget)
			if tc.wantErr != nil {
				if got := bodyError(err); !errors.Is(got, tc.wantErr) {
					t.Fatalf("err = %v (told %v), want %v", err, got, tc.wantErr)
				}
			} else if err != nil || !bytes.Equal(body, sent) {
				t.Fatalf("read %d of %d bytes: %v", len(body), len(sent), err)
			}
			if taken != int64(tc.wantHeld) || budget.used.Load() != taken || taken > tc.budget {
				t.Fatalf("took %d (budget used %d of %d), want the %d bytes of its buffer", taken, budget.used.Load(), tc.budget, tc.wantHeld)
			}
		})
	}
}

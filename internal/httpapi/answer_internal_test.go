package httpapi

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
)

// TestLaterWriterKeepsGinsSemantics: behind answerLater a handler sees
// gin's writer as it would without it (status before and after the body,
// Size, Written, Flush, Hijack), and what it answered arrives as written.
func TestLaterWriterKeepsGinsSemantics(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/status-only", answerLater, func(c *gin.Context) {
		c.Header("X-Kept", "1")
		c.Status(http.StatusNoContent)
	})
	r.GET("/body", answerLater, func(c *gin.Context) {
		w := c.Writer
		if w.Written() || w.Size() != -1 || w.Status() != http.StatusOK {
			t.Errorf("fresh: written %v, size %d, status %d", w.Written(), w.Size(), w.Status())
		}
		c.Status(http.StatusAccepted)
		_, _ = w.WriteString("ab")
		_, _ = w.Write([]byte("cd"))
		c.Status(http.StatusTeapot) // after the body: ignored, as by gin
		w.Flush()
		if !w.Written() || w.Size() != 4 || w.Status() != http.StatusAccepted {
			t.Errorf("written: written %v, size %d, status %d", w.Written(), w.Size(), w.Status())
		}
		if _, _, err := w.Hijack(); err == nil {
			t.Error("hijacked after the body was written")
		}
	})
	r.GET("/hijack", answerLater, func(c *gin.Context) {
		conn, rw, err := c.Writer.Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = rw.Flush()
	})
	r.GET("/unwrap", answerLater, func(c *gin.Context) {
		if _, ok := serverWriter(c.Writer).(interface{ Unwrap() http.ResponseWriter }); ok {
			t.Error("serverWriter stops at a wrapper")
		}
		if err := http.NewResponseController(c.Writer).SetWriteDeadline(time.Time{}); err != nil {
			t.Errorf("ResponseController through the buffer: %v", err)
		}
		c.String(http.StatusOK, "ok")
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	get := func(path string) (*http.Response, string) {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	if res, b := get("/status-only"); res.StatusCode != http.StatusNoContent || b != "" || res.Header.Get("X-Kept") != "1" {
		t.Errorf("status only = %d %q, X-Kept %q", res.StatusCode, b, res.Header.Get("X-Kept"))
	}
	if res, b := get("/body"); res.StatusCode != http.StatusAccepted || b != "abcd" {
		t.Errorf("body = %d %q, want 202 abcd", res.StatusCode, b)
	}
	if res, b := get("/hijack"); res.StatusCode != http.StatusOK || b != "hijacked" {
		t.Errorf("hijacked = %d %q", res.StatusCode, b)
	}
	if res, b := get("/unwrap"); res.StatusCode != http.StatusOK || b != "ok" {
		t.Errorf("unwrap = %d %q", res.StatusCode, b)
	}
}

// TestShedsAreSaidWhenTheirIntervalEnds: the refusals after the first of a
// flood are logged, in one line, once the interval has passed, whether or
// not another comes; not held back until the next refusal, maybe hours
// later, counted as if recent.
func TestShedsAreSaidWhenTheirIntervalEnds(t *testing.T) {
	var log strings.Builder
	var mu sync.Mutex
	s := &server{Config: Config{Logger: slog.New(slog.NewJSONHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return log.Write(p)
	}), nil))}, sheds: shedLog{every: 100 * time.Millisecond}}
	for range 50 {
		s.shed()
	}
	refused := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var n []string
		for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
			if i := strings.Index(l, `"refused":`); i >= 0 {
				n = append(n, strings.SplitN(l[i+len(`"refused":`):], ",", 2)[0])
			}
		}
		return n
	}
	if got := refused(); !slices.Equal(got, []string{"1"}) {
		t.Fatalf("at the flood: lines %v, want one saying 1", got)
	}
	time.Sleep(300 * time.Millisecond)
	if got := refused(); !slices.Equal(got, []string{"1", "49"}) {
		t.Fatalf("an interval after the flood, none since: lines %v, want 1 then 49", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestPanicLeavesNoHeadersOfTheAnswer: a handler that set its answer's
// headers and body, then panicked, leaves none of them on the 500; the
// request id set before stays.
func TestPanicLeavesNoHeadersOfTheAnswer(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(func(c *gin.Context) {
		defer func() {
			if recover() != nil {
				c.AbortWithStatus(http.StatusInternalServerError)
			}
		}()
		c.Header(requestIDHeader, "r-1")
		c.Next()
	})
	r.POST("/p", answerLater, func(c *gin.Context) {
		c.Header("Location", "/v1/orders/abc")
		c.Header("Idempotent-Replayed", "true")
		c.JSON(http.StatusCreated, gin.H{"id": "abc"})
		panic("after the answer")
	})
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/p", nil))
	if w.Code != http.StatusInternalServerError || w.Header().Get("Location") != "" || w.Header().Get("Idempotent-Replayed") != "" ||
		w.Header().Get("Content-Type") != "" || w.Header().Get(requestIDHeader) != "r-1" || w.Body.Len() != 0 {
		t.Fatalf("%d %v %q; want 500 with the request id only", w.Code, w.Header(), w.Body.String())
	}
}

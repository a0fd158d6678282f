package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
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

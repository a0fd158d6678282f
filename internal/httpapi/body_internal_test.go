package httpapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

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

package httpapi

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
)

// answerLater sends a request's answer after the handlers it wraps have
// returned: what they hold (readBody's share of the body budget, limit's
// in-flight slot, /metrics' own) bounds the work, not the client's network.
// Written from inside a handler, an answer larger than what net/http
// buffers (2 to 4 KiB; an order of 100 lines is 12 KB) goes to the socket
// there, and a client that does not read its answers would hold its slots
// until the write deadline. So the handlers write into a buffer, and the
// answer goes out once they are done, the slots free: such a client then
// holds only its connection. It comes before the first handler that takes
// a slot.
//
// The status and body are held back; the headers are not copied (the
// buffer shares the server's header map, which nothing sends before the
// status). Errors recorded with c.Error are answered by renderErrors,
// outside, after the buffer is gone. A handler that panics leaves nothing
// of its answer, its headers included: recover answers 500 on the server's
// writer.
func answerLater(c *gin.Context) {
	w := laterPool.Get().(*laterWriter)
	w.reset(c.Writer)
	c.Writer = w
	done := false
	defer func() {
		c.Writer = w.ResponseWriter
		if !done {
			// A panic: recover answers 500 on the server's writer, which
			// must not carry what the handler set for its own answer
			// (Location, Idempotent-Replayed, …). What the middleware
			// before this one set stays.
			h := w.ResponseWriter.Header()
			for k := range h {
				if k != requestIDHeader && k != "Connection" {
					delete(h, k)
				}
			}
		}
		w.ResponseWriter = nil
		if cap(w.buf) <= maxPooledAnswer {
			laterPool.Put(w)
		}
	}()
	c.Next()
	w.send()
	done = true
}

// laterPool keeps the buffers, so that an answer costs no allocation.
var laterPool = sync.Pool{New: func() any { return new(laterWriter) }}

// maxPooledAnswer is the largest buffer kept for the next answer: an
// order's is 12 KB at most; a /metrics answer is larger, and rare.
const maxPooledAnswer = 64 << 10

// laterWriter is a gin.ResponseWriter that holds the status and the body
// until send, with gin's own semantics: a status set after the body was
// written is ignored, Size is -1 until something is written.
type laterWriter struct {
	gin.ResponseWriter // the writer send writes to; its Header is shared
	buf                []byte
	status             int
	size               int // -1 until written, as gin's
	hijacked           bool
}

var _ gin.ResponseWriter = (*laterWriter)(nil)

const notWritten = -1

func (w *laterWriter) reset(out gin.ResponseWriter) {
	w.ResponseWriter = out
	w.buf = w.buf[:0]
	w.status = out.Status() // gin's NoMethod and NoRoute set theirs beforehand
	w.size = notWritten
	w.hijacked = false
}

// send writes what the handlers answered to the server's writer. An answer
// with nothing written carries its status only: gin writes it after the
// last handler, unless renderErrors answers an error first.
func (w *laterWriter) send() {
	if w.hijacked {
		return
	}
	out := w.ResponseWriter
	out.WriteHeader(w.status)
	if !w.Written() {
		return
	}
	out.WriteHeaderNow()
	if len(w.buf) > 0 {
		_, _ = out.Write(w.buf) // a client gone: nothing left to tell it
	}
}

// Unwrap is the server's writer, for http.ResponseController and
// serverWriter.
func (w *laterWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *laterWriter) WriteHeader(code int) {
	if code > 0 && w.status != code && !w.Written() {
		w.status = code
	}
}

func (w *laterWriter) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
	}
}

func (w *laterWriter) Write(p []byte) (int, error) {
	w.WriteHeaderNow()
	w.buf = append(w.buf, p...)
	w.size += len(p)
	return len(p), nil
}

func (w *laterWriter) WriteString(s string) (int, error) {
	w.WriteHeaderNow()
	w.buf = append(w.buf, s...)
	w.size += len(s)
	return len(s), nil
}

func (w *laterWriter) Status() int   { return w.status }
func (w *laterWriter) Size() int     { return w.size }
func (w *laterWriter) Written() bool { return w.size != notWritten }

// Flush sends nothing: the answer goes out whole once the handlers are
// done (no route of the API streams).
func (w *laterWriter) Flush() { w.WriteHeaderNow() }

// Hijack hands over the connection, as gin's does, while no body is
// written; the answer held is dropped with it.
func (w *laterWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.size > 0 {
		return nil, nil, errHijackWritten
	}
	conn, rw, err := w.ResponseWriter.Hijack()
	if err == nil {
		w.hijacked = true
		w.WriteHeaderNow()
	}
	return conn, rw, err
}

var errHijackWritten = errors.New("httpapi: answer already written, cannot hijack")

package httpapi

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
)

const requestIDHeader = "X-Request-Id"

// requestID tags the request and its logs; a client's own id is kept when sane.
func (s *server) requestID(c *gin.Context) {
	id := c.GetHeader(requestIDHeader)
	if id == "" || len(id) > 128 {
		id = uuid.NewString()
	}
	c.Set(requestIDHeader, id)
	c.Header(requestIDHeader, id)
	c.Next()
}

// recover turns a panic into a logged 500 in the API's error shape.
func (s *server) recover(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.Logger.Error("panic", "request_id", c.GetString(requestIDHeader), "panic", v)
			_ = c.Error(fmt.Errorf("panic: %v", v))
			s.writeError(c)
		}
	}()
	c.Next()
}

// observe logs and counts every request once it is answered.
func (s *server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	d := time.Since(start)
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	status := c.Writer.Status()
	if s.Metrics != nil {
		s.Metrics.HTTP(c.Request.Method, route, status, d)
	}
	level := s.Logger.Debug
	if status >= 500 {
		level = s.Logger.Error
	}
	level("http", "request_id", c.GetString(requestIDHeader), "method", c.Request.Method, "path", c.Request.URL.Path,
		"status", status, "duration", d, "errors", c.Errors.ByType(gin.ErrorTypeAny).String())
}

// renderErrors answers, in the API's error shape, the first error a handler
// recorded with c.Error; handlers only return after recording one.
func (s *server) renderErrors(c *gin.Context) {
	c.Next()
	if len(c.Errors) > 0 && !c.Writer.Written() {
		s.writeError(c)
	}
}

func (s *server) writeError(c *gin.Context) {
	err := c.Errors[0].Err
	status, body := classify(err)
	body.RequestID = c.GetString(requestIDHeader)
	if status >= 500 && status != http.StatusServiceUnavailable {
		s.Logger.Error("request failed", "request_id", body.RequestID, "err", err)
	}
	if status == http.StatusServiceUnavailable {
		c.Header("Retry-After", "1")
	}
	c.AbortWithStatusJSON(status, gin.H{"error": body})
}

// admin guards stock changes when the service has an admin token.
func (s *server) admin(c *gin.Context) {
	if s.AdminToken == "" {
		c.Next()
		return
	}
	token, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(s.AdminToken)) != 1 {
		c.Header("WWW-Authenticate", `Bearer realm="stockguard"`)
		_ = c.Error(errUnauthorized)
		c.Abort()
		return
	}
	c.Next()
}

// fail records err for renderErrors; a client that went away is not our error.
func fail(c *gin.Context, err error) {
	if c.Request.Context().Err() != nil && !errors.Is(err, errClientGone) {
		err = fmt.Errorf("%w: %w", errClientGone, err)
	}
	_ = c.Error(err)
}

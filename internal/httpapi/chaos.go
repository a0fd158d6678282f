package httpapi

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/lock"
)

// ZKSessionFunc returns the id and password of the ZooKeeper session the
// service's locks live in; ok is false while there is none.
type ZKSessionFunc func() (id int64, password []byte, ok bool)

// ZKSessionOf returns locker's SessionCredentials method when it has one
// (the zookeeper backend), else nil, so that wiring code can pass any
// backend without knowing which it is.
func ZKSessionOf(locker any) ZKSessionFunc {
	if l, ok := locker.(interface {
		SessionCredentials() (int64, []byte, bool)
	}); ok {
		return l.SessionCredentials
	}
	return nil
}

// errNoZKSession answers a credentials request between two sessions.
var errNoZKSession = fmt.Errorf("no ZooKeeper session at the moment: %w", lock.ErrUnavailable)

// debugRoutes registers the fault-injection endpoints. They hand out what
// it takes to end the service's lock session, so they exist only when the
// service runs with --chaos and has such a session (otherwise the path is
// an unknown route, 404 not_found, like any other), and they ask for the
// admin token as stock changes do: --chaos alone must not let any caller
// end the session.
func (s *server) debugRoutes(r *gin.Engine) {
	if !s.Chaos || s.ZKSession == nil {
		return
	}
	r.GET("/debug/zk-session", s.admin, noBody, s.zkSession)
}

// zkSession answers the current session's credentials. The id is also given
// in hex, as ZooKeeper's own logs print it, and because it exceeds the
// integers a JavaScript client can hold exactly.
func (s *server) zkSession(c *gin.Context) {
	id, password, ok := s.ZKSession()
	if !ok {
		fail(c, errNoZKSession)
		return
	}
	c.JSON(http.StatusOK, gin.H{
		"session_id":     id,
		"session_id_hex": "0x" + strconv.FormatInt(id, 16),
		"password_hex":   hex.EncodeToString(password),
	})
}

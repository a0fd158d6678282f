// Package floor is the HTTP floor of the bench: a bare gin handler that
// decodes an order body of the service's shape and answers 201 with an
// order of the service's shape, touching no lock and no database. Run as
// as many processes as the service's instances and driven by the same
// generator, it is what the HTTP and JSON alone cost on this machine, the
// upper bound no instance can pass.
package floor

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
)

// line and order are POST /v1/orders' request (api/openapi.yaml,
// OrderRequest); placedLine and placed its 201 answer (Order).
type line struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

type order struct {
	Lines       []line `json:"lines"`
	HoldSeconds *int64 `json:"hold_seconds"`
}

type placedLine struct {
	SKU        string `json:"sku"`
	Quantity   int64  `json:"quantity"`
	FenceToken uint64 `json:"fence_token"`
}

type placed struct {
	OrderID   string       `json:"order_id"`
	Status    string       `json:"status"`
	Lines     []placedLine `json:"lines"`
	ExpiresAt time.Time    `json:"expires_at"`
}

// defaultHold is the service's hold when the order names none.
const defaultHold = 900 * time.Second

// Handler is the floor: gin in release mode with recovery and nothing
// else, one route.
func Handler() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	var token atomic.Uint64 // stands in for the lease's fencing token
	r.POST("/v1/orders", func(c *gin.Context) {
		var o order
		dec := json.NewDecoder(c.Request.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil || len(o.Lines) == 0 {
			c.JSON(http.StatusBadRequest, gin.H{"error": gin.H{"code": "invalid_request", "message": "malformed order"}})
			return
		}
		hold := defaultHold
		if o.HoldSeconds != nil {
			hold = time.Duration(*o.HoldSeconds) * time.Second
		}
		p := placed{OrderID: uuid.NewString(), Status: "reserved", Lines: make([]placedLine, len(o.Lines)),
			ExpiresAt: time.Now().Add(hold).UTC()}
		t := token.Add(1)
		for i, l := range o.Lines {
			p.Lines[i] = placedLine{SKU: l.SKU, Quantity: l.Quantity, FenceToken: t}
		}
		c.Header("Location", "/v1/orders/"+p.OrderID)
		c.Header("X-Request-Id", strconv.FormatUint(t, 10))
		c.JSON(http.StatusCreated, p)
	})
	return r
}

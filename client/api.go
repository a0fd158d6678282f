package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/inventory"
)

// NewIdempotencyKey returns a fresh key for one logical order.
func NewIdempotencyKey() string { return uuid.NewString() }

// SetStock creates sku or sets its available units (PUT /v1/skus/{sku}).
// The value is absolute: a repeat of a PUT that landed would set it again
// over the orders placed in between (received moves by the change in
// available), so SetStock is retried only after a 503 lock_unavailable or
// overloaded, which say nothing was written. After any other failure (no
// answer, store_unavailable, timeout) it may or may not have been applied,
// and the error matches ErrOutcomeUnknown: read the SKU before setting it
// again.
func (c *Client) SetStock(ctx context.Context, sku string, available int64) (*SKU, error) {
	return c.setStock(ctx, sku, available, nil)
}

// SetStockIf is SetStock on the condition that sku's counters are still
// the ones in seen, the SKU as the caller read it (SKU), when the service
// holds its lock: it sends seen.Available as expect_available and
// seen.Received as expect_received. Otherwise nothing is written and the
// error matches ErrStockChanged, its message naming the counters that
// differ. Read the SKU, compute the new level from what it says and pass
// what it said as seen: orders placed between the read and the write then
// make the call fail instead of being undone. A caller that read 404
// passes SKU{}: a SKU that does not exist counts as 0 of each, so the call
// creates it, or sets it only while it has never received a unit.
//
// A repeat of a SetStockIf that landed finds received moved by the change
// it made, whatever orders did to available since (orders, confirms,
// cancels and expiries never move received), and answers stock_changed
// instead of applying the change twice; one that changed nothing may pass
// again, and changes nothing again. So SetStockIf is retried as reads are:
// after a 503 and after an attempt that got no answer. The client cannot
// tell whether ErrStockChanged answers another writer's change or the
// call's own earlier attempt, which landed without its answer reaching the
// client: when an attempt may have been lost, the error matches
// ErrOutcomeUnknown as well; read the SKU to learn whether it landed.
func (c *Client) SetStockIf(ctx context.Context, sku string, available int64, seen SKU) (*SKU, error) {
	return c.setStock(ctx, sku, available, &seen)
}

// stockBody is PUT /v1/skus/{sku}'s body.
type stockBody struct {
	Available       int64  `json:"available"`
	ExpectAvailable *int64 `json:"expect_available,omitempty"`
	ExpectReceived  *int64 `json:"expect_received,omitempty"`
}

// setStock is SetStock, or SetStockIf with seen.
func (c *Client) setStock(ctx context.Context, sku string, available int64, seen *SKU) (*SKU, error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return nil, notSent("setStock", err)
	}
	if err := inventory.ValidateStock(available); err != nil {
		return nil, notSent("setStock", err)
	}
	b := stockBody{Available: available}
	if seen != nil {
		b.ExpectAvailable, b.ExpectReceived = &seen.Available, &seen.Received
		if err := inventory.ValidateExpectation(inventory.StockExpectation{Available: b.ExpectAvailable,
			Received: b.ExpectReceived}); err != nil {
			return nil, notSent("setStock", err)
		}
	}
	body, _ := json.Marshal(b)
	var out SKU
	// Only the unconditional level must not be repeated once it may have
	// landed: the conditional one refuses its own repeat.
	_, err := c.do(ctx, call{op: "setStock", method: http.MethodPut, path: "/v1/skus/" + url.PathEscape(sku),
		body: body, header: c.admin(), want: http.StatusOK, out: &out, unwrittenOnly: seen == nil})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// SKU reads sku's counters (GET /v1/skus/{sku}).
func (c *Client) SKU(ctx context.Context, sku string) (*SKU, error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return nil, notSent("getSKU", err)
	}
	var out SKU
	if _, err := c.do(ctx, call{op: "getSKU", method: http.MethodGet, path: "/v1/skus/" + url.PathEscape(sku),
		want: http.StatusOK, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Audit recomputes sku from its order lines (GET /v1/skus/{sku}/audit).
func (c *Client) Audit(ctx context.Context, sku string) (*Audit, error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return nil, notSent("auditSKU", err)
	}
	var out Audit
	if _, err := c.do(ctx, call{op: "auditSKU", method: http.MethodGet, path: "/v1/skus/" + url.PathEscape(sku) + "/audit",
		want: http.StatusOK, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

type orderBody struct {
	Lines       []lineBody `json:"lines"`
	HoldSeconds int        `json:"hold_seconds,omitempty"`
}

type lineBody struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// PlaceOrder reserves every line of req or none (POST /v1/orders). Every
// attempt carries req's idempotency key, or one made for this call, so a
// retry after a lost answer replays the order instead of placing it twice;
// the key is in the returned Order, and in the error (IdempotencyKeyOf). A
// call that fails without an answer that settles it (no answer,
// store_unavailable, timeout, idempotency_key_in_flight after the client's
// waits, or any failure after an attempt whose answer was lost, a 503
// overloaded included: see ErrOutcomeUnknown) leaves the outcome unknown,
// and its error matches ErrOutcomeUnknown: call again with the same key,
// which answers with the order if it was placed and places it if not.
// Order.Replayed and Order.ReplayedAfterLostAnswer tell a replay of an
// earlier call from one that may be of this call's own lost attempt.
func (c *Client) PlaceOrder(ctx context.Context, req OrderRequest) (*Order, error) {
	if err := checkOrder(req); err != nil {
		return nil, notSent("placeOrder", err)
	}
	b := orderBody{Lines: make([]lineBody, len(req.Lines)), HoldSeconds: req.HoldSeconds}
	for i, l := range req.Lines {
		b.Lines[i] = lineBody{SKU: l.SKU, Quantity: l.Quantity}
	}
	body, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("client: placeOrder: %w", err)
	}
	return c.PlaceOrderJSON(ctx, req.IdempotencyKey, body)
}

// PlaceOrderJSON is PlaceOrder for a body the caller encoded already, the
// JSON of POST /v1/orders ({"lines":[{"sku","quantity"}],"hold_seconds"}):
// a load generator encodes each order once and sends it again on a retry
// of its own. key is the order's idempotency key; "" makes one, and one the
// service would refuse is not sent (ErrInvalidRequest). The body is sent
// as it is: a body the API refuses is an *APIError matching
// ErrInvalidRequest.
func (c *Client) PlaceOrderJSON(ctx context.Context, key string, body []byte) (*Order, error) {
	// A key made here was never sent before this call: any replay is of
	// one of its own attempts.
	made := key == ""
	if made {
		key = NewIdempotencyKey()
	} else if err := inventory.ValidateIdempotencyKey(key); err != nil {
		return nil, notSent("placeOrder", err)
	}
	var out Order
	a, err := c.do(ctx, call{op: "placeOrder", method: http.MethodPost, path: "/v1/orders", body: body,
		key: key, want: http.StatusCreated, out: &out})
	if err != nil {
		return nil, err
	}
	out.IdempotencyKey = key
	if a.header.Get("Idempotent-Replayed") == "true" && !made {
		out.Replayed = !a.lostBefore
		out.ReplayedAfterLostAnswer = a.lostBefore
	}
	return &out, nil
}

// Order reads an order in any status (GET /v1/orders/{id}).
func (c *Client) Order(ctx context.Context, id string) (*Order, error) {
	return c.order(ctx, "getOrder", http.MethodGet, id, "")
}

// Confirm turns a reserved order's held units into sold ones (POST
// /v1/orders/{id}/confirm); confirming a confirmed order changes nothing.
func (c *Client) Confirm(ctx context.Context, id string) (*Order, error) {
	return c.order(ctx, "confirmOrder", http.MethodPost, id, "/confirm")
}

// Cancel returns a reserved order's held units to stock (POST
// /v1/orders/{id}/cancel); cancelling a cancelled order changes nothing.
func (c *Client) Cancel(ctx context.Context, id string) (*Order, error) {
	return c.order(ctx, "cancelOrder", http.MethodPost, id, "/cancel")
}

// order runs op on order id. An id that is no uuid, such as the "" of an
// Order never filled in, is not sent: the service would answer 404
// unknown_order, or 404 not_found for "", and either reads as an order
// that vanished rather than the caller's bug it is.
func (c *Client) order(ctx context.Context, op, method, id, action string) (*Order, error) {
	if inventory.ValidateOrderID(id) != nil {
		return nil, notSent(op, fmt.Errorf("order id %q is not a uuid", inventory.Clip(id)))
	}
	var out Order
	if _, err := c.do(ctx, call{op: op, method: method, path: "/v1/orders/" + url.PathEscape(id) + action,
		want: http.StatusOK, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Healthz returns nil while the service's process serves HTTP (GET /healthz).
func (c *Client) Healthz(ctx context.Context) error {
	_, err := c.do(ctx, call{op: "healthz", method: http.MethodGet, path: "/healthz", want: http.StatusOK})
	return err
}

// Ready returns nil when the instance can serve (GET /readyz); a 503 is an
// *APIError matching ErrNotReady. Ready is not retried: the answer is the
// point.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, call{op: "readyz", method: http.MethodGet, path: "/readyz", want: http.StatusOK, once: true})
	return err
}

package client

import api "github.com/stockguard/stockguard/client"

// SKUState is the body of GET and PUT /v1/skus/{sku}: the service's counters.
type SKUState = api.SKU

// Audit is the body of GET /v1/skus/{sku}/audit, computed by the service from
// order lines independently of the counters.
type Audit = api.Audit

// APIError is an error answer of the service. errors.As finds it in every
// error of this package that the service answered.
type APIError = api.APIError

// OrderLine is one line of an order request.
type OrderLine struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// OrderRequest is the body of POST /v1/orders as the load tester encodes it,
// once per order, for PlaceOrder to send on every attempt.
type OrderRequest struct {
	Lines       []OrderLine `json:"lines"`
	HoldSeconds int         `json:"hold_seconds,omitempty"`
}

// OrderResponse is an order as the service answered it (201 from POST
// /v1/orders, 200 from confirm and cancel), in the shape the receipts
// compare with the OrderRequest.
type OrderResponse struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
	Lines   []struct {
		SKU        string `json:"sku"`
		Quantity   int    `json:"quantity"`
		FenceToken uint64 `json:"fence_token"`
	} `json:"lines"`
	ExpiresAt string `json:"expires_at"`
}

package client_test

import (
	"context"
	"fmt"

	"github.com/stockguard/stockguard/client"
)

// placeReplayConfirm is README.md's example, word for word (TestReadme
// checks): it places an order, replays it with its idempotency key, and
// confirms it.
func placeReplayConfirm(ctx context.Context, baseURL string) error {
	c, err := client.New(baseURL)
	if err != nil {
		return err
	}
	order := client.OrderRequest{Lines: []client.Line{{SKU: "widget-1", Quantity: 2}}}
	placed, err := c.PlaceOrder(ctx, order) // retried with one idempotency key
	if err != nil {
		return err
	}
	order.IdempotencyKey = placed.IdempotencyKey
	again, err := c.PlaceOrder(ctx, order) // the first answer again, not a second order
	if err != nil {
		return err
	}
	fmt.Println("replayed:", again.Replayed, again.ID == placed.ID)
	_, err = c.Confirm(ctx, placed.ID)
	return err
}

// Example places, replays and confirms an order against a service on the
// default address.
func Example() {
	if err := placeReplayConfirm(context.Background(), "http://127.0.0.1:8080"); err != nil {
		fmt.Println(err)
	}
}

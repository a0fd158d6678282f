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
	// One key per checkout, kept with it: the order sent again under it
	// is answered with the same order, never a second one.
	order := client.OrderRequest{Lines: []client.Line{{SKU: "widget-1", Quantity: 2}},
		IdempotencyKey: client.NewIdempotencyKey()}
	placed, err := c.PlaceOrder(ctx, order) // its retries carry the key
	if err != nil {
		return err // outcome unknown (no answer, a 503)? send order again later
	}
	again, err := c.PlaceOrder(ctx, order) // a double submit
	if err != nil {
		return err
	}
	// Replayed: an earlier call placed it and follows it up (payment,
	// mail). ReplayedAfterLostAnswer: perhaps this call did; follow up,
	// keyed by the order ID so nothing runs twice.
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

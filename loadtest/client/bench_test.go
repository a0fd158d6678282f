package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkPlaceOrder measures one order through the client against a
// handler that answers at once, so the figure is the client's own cost.
func BenchmarkPlaceOrder(b *testing.B) {
	benchmarkOrder(b, http.StatusCreated, KindReserved, `{"order_id":"0b8f3c1e-6f1a-4c55-9a8e-2d1f0c9b7a6e",`+
		`"status":"reserved","lines":[{"sku":"sku-1","quantity":2,"fence_token":42}],`+
		`"expires_at":"2026-12-01T14:00:00.123456Z"}`)
}

// BenchmarkPlaceOrderRefused is BenchmarkPlaceOrder for the answer most
// orders of a sold-out SKU get.
func BenchmarkPlaceOrderRefused(b *testing.B) {
	benchmarkOrder(b, http.StatusConflict, KindInsufficient, `{"error":{"code":"insufficient_stock",`+
		`"message":"insufficient stock","sku":"sku-1","requested":2,"available":0}}`)
}

func benchmarkOrder(b *testing.B, status int, want Kind, answer string) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	c := New(4, "", 5*time.Second)
	defer c.Close()
	body := []byte(`{"lines":[{"sku":"sku-1","quantity":2}]}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if out := c.PlaceOrder(ctx, srv.URL, "k", body); out.Kind != want {
			b.Fatalf("outcome %+v", out)
		}
	}
}

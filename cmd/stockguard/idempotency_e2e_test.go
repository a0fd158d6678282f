package main

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestKeyRunningForAnotherOrderIsInFlight: a request whose Idempotency-Key
// is running on the same instance for another order is told 409
// idempotency_key_in_flight, retryable, not the final 422
// idempotency_key_reused: the first may still fail, which frees the key,
// and the same request is then placed.
func TestKeyRunningForAnotherOrderIsInFlight(t *testing.T) {
	in := startInstance(t, backendEnv(t), "--lock=local", "--chaos", "--lock-wait=1s")
	sku := "key-" + uuid.NewString()[:8]
	if st, body := call(t, "PUT", in.url+"/v1/skus/"+sku, `{"available":10}`); st != 200 {
		t.Fatalf("PUT: %d %v", st, body)
	}
	key := uuid.NewString()
	one := `{"lines":[{"sku":"` + sku + `","quantity":1}]}`
	two := `{"lines":[{"sku":"` + sku + `","quantity":2}]}`
	var wg sync.WaitGroup
	var first int
	var firstBody map[string]any
	// An order without a key holds the SKU's lock for 2.5 s (a chaos pause
	// inside the section), so the first keyed order gives up after
	// --lock-wait: it fails, and frees its key.
	wg.Go(func() { call(t, "POST", in.url+"/v1/orders", one, "X-Chaos-Pause", "2500ms") })
	time.Sleep(300 * time.Millisecond)
	wg.Go(func() { first, firstBody = call(t, "POST", in.url+"/v1/orders", one, "Idempotency-Key", key) })
	time.Sleep(300 * time.Millisecond)
	st, body := call(t, "POST", in.url+"/v1/orders", two, "Idempotency-Key", key)
	wg.Wait()
	if first != 503 {
		t.Fatalf("the first keyed order = %d %v, want 503 lock_unavailable (it waited behind a 2.5 s pause)", first, firstBody)
	}
	if code := errorCode(body); st != 409 || code != "idempotency_key_in_flight" {
		t.Fatalf("the key with another order while the first ran = %d %q, want 409 idempotency_key_in_flight", st, code)
	}
	if st, body := call(t, "POST", in.url+"/v1/orders", two, "Idempotency-Key", key); st != 201 {
		t.Fatalf("the same request once the first failed = %d %v, want 201", st, body)
	}
	if st, body := call(t, "POST", in.url+"/v1/orders", one, "Idempotency-Key", key); st != 422 || errorCode(body) != "idempotency_key_reused" {
		t.Fatalf("the key with another order once placed = %d %v, want 422 idempotency_key_reused", st, body)
	}
}

// errorCode is the code of an error answer's body, or "".
func errorCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

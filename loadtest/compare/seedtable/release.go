package seedtable

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/loadtest/client"
)

// releaseLimit bounds the wait for the lock after its holder died: far
// beyond every bound the rig sets (1 s leases, a 4 s ZooKeeper session).
const releaseLimit = 30 * time.Second

// holderStall is the X-Chaos-Pause asked of the order that holds the
// lease: far longer than the measurement, so that only the holder's death
// can free the lock.
const holderStall = time.Minute

// measureRelease makes the rig's last instance hold a fresh SKU's lease
// inside its critical section (an order with X-Chaos-Pause, its stall seen
// in the instance's log), SIGKILLs it, and times the orders the first
// instance sends for that SKU until one is reserved.
func (r *rig) measureRelease(ctx context.Context, bound string) Release {
	out := Release{Bound: bound}
	h := len(r.ins) - 1
	holder, other := r.ins[h], r.ins[0]
	sku := "seed-" + uuid.NewString()[:13]
	if _, err := r.client.PutSKU(ctx, holder.URL, sku, 10); err != nil {
		out.Error = err.Error()
		return out
	}
	before := r.pausesLogged(h)
	stallCtx, cancelStall := context.WithCancel(ctx)
	defer cancelStall()
	go stalledOrder(stallCtx, holder.URL, sku)
	if err := r.waitPausing(ctx, h, before, 10*time.Second); err != nil {
		out.Error = err.Error()
		return out
	}
	if err := holder.Signal(syscall.SIGKILL); err != nil {
		out.Error = fmt.Sprintf("SIGKILL the holder: %v", err)
		return out
	}
	killed := time.Now()
	r.alive[h] = false
	body := orderBody(sku, 1)
	for time.Since(killed) < releaseLimit && ctx.Err() == nil {
		out.Attempts++
		o := r.client.PlaceOrder(ctx, other.URL, uuid.NewString(), body)
		if o.Kind == client.KindReserved {
			ms := float64(time.Since(killed).Microseconds()) / 1000
			out.Ms = &ms
			return out
		}
		if o.Kind != client.KindLockUnavailable && o.Kind != client.KindUnknown {
			out.Error = fmt.Sprintf("order after the kill answered %d %s", o.Status, o.Code)
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
	out.Error = fmt.Sprintf("no order reserved within %v of the kill (%d attempts)", releaseLimit, out.Attempts)
	return out
}

// stalledOrder posts a one-unit order that stalls inside the critical
// section; its answer never comes (the instance is killed).
func stalledOrder(ctx context.Context, base, sku string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/orders", bytes.NewReader(orderBody(sku, 1)))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	req.Header.Set("X-Chaos-Pause", holderStall.String())
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
}

func orderBody(sku string, qty int) []byte {
	b, err := json.Marshal(client.OrderRequest{HoldSeconds: 900, Lines: []client.OrderLine{{SKU: sku, Quantity: qty}}})
	if err != nil {
		panic(err) // plain structs always encode
	}
	return b
}

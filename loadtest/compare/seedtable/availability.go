package seedtable

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/stockguard/stockguard/loadtest/client"
)

// availabilityClients is the closed-loop load on the rig while its servers
// fail: enough to keep every instance busy, few enough that a backend whose
// orders wait --lock-wait still sends several in a window.
const availabilityClients = 8

// answer is one order of the availability load.
type answer struct {
	sent time.Time
	kind client.Kind
}

// measureAvailability runs a steady load of one-unit orders on the rig's
// live instances, kills minority servers (if the backend has a minority),
// waits window, then kills up to a majority and waits window again; each
// window's cell is the share of the orders sent in it that were answered 201.
func (r *rig) measureAvailability(ctx context.Context, window time.Duration) Availability {
	servers, err := r.servers(ctx)
	if err != nil {
		return Availability{Error: err.Error()}
	}
	n := len(servers)
	out := Availability{Servers: n}
	urls := r.urls()
	if len(urls) == 0 {
		return Availability{Error: "no instance alive"}
	}
	skus := make([]string, 4)
	for i := range skus {
		skus[i] = "seed-" + uuid.NewString()[:13]
		if _, err := r.client.PutSKU(ctx, urls[i%len(urls)], skus[i], 1_000_000); err != nil {
			return Availability{Error: err.Error()}
		}
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
	)
	loadCtx, stop := context.WithCancel(ctx)
	for g := range availabilityClients {
		wg.Go(func() {
			for i := 0; loadCtx.Err() == nil; i++ {
				sent := time.Now()
				o := r.client.PlaceOrder(ctx, urls[(g+i)%len(urls)], uuid.NewString(), orderBody(skus[(g+i)%len(skus)], 1))
				mu.Lock()
				answers = append(answers, answer{sent: sent, kind: o.Kind})
				mu.Unlock()
			}
		})
	}
	time.Sleep(window / 4) // the load in flight before the first kill
	minority, majority := (n-1)/2, n/2+1
	killed := 0
	killTo := func(k int) error {
		for ; killed < k; killed++ {
			if err := servers[killed].Kill(); err != nil {
				return fmt.Errorf("kill %s: %w", servers[killed].Addr(), err)
			}
		}
		return nil
	}
	type span struct {
		w        *Window
		from, to time.Time
	}
	var spans []span
	measure := func(k int) *Window {
		if err := killTo(k); err != nil {
			out.Error = err.Error()
			return nil
		}
		w := &Window{Down: k, Seconds: window.Seconds()}
		from := time.Now()
		time.Sleep(window)
		spans = append(spans, span{w: w, from: from, to: time.Now()})
		return w
	}
	if minority == 0 {
		out.Minority = &Window{NA: naNoMinority}
	} else {
		out.Minority = measure(minority)
	}
	if out.Error == "" {
		out.Majority = measure(majority)
	}
	stop()
	wg.Wait() // bounded: each order within the client's request timeout
	for _, sp := range spans {
		for _, a := range answers {
			if a.sent.Before(sp.from) || !a.sent.Before(sp.to) {
				continue
			}
			sp.w.Orders++
			if a.kind == client.KindReserved {
				sp.w.Reserved++
			}
		}
		if sp.w.Orders > 0 {
			sp.w.Share201 = float64(sp.w.Reserved) / float64(sp.w.Orders)
		}
	}
	return out
}

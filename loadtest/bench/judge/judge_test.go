package judge

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// TestTargeter checks the attack's orders: round-robin over the URLs, a
// fresh key each, one-unit single-line bodies over every SKU.
func TestTargeter(t *testing.T) {
	c := Config{URLs: []string{"http://a", "http://b", "http://c"}, SKUs: []string{"s0", "s1", "s2", "s3"}, KeyPrefix: "k", HoldSeconds: 60, Seed: 9}
	bodies := make([][]byte, len(c.SKUs))
	for i, s := range c.SKUs {
		bodies[i], _ = json.Marshal(order{Lines: []orderLine{{SKU: s, Quantity: 1}}, HoldSeconds: 60})
	}
	var seq atomic.Uint64
	tr := targeter(c, bodies, &seq)
	keys, skus := map[string]bool{}, map[string]int{}
	for n := range 400 {
		var tg vegeta.Target
		if err := tr(&tg); err != nil {
			t.Fatal(err)
		}
		if want := c.URLs[n%3] + "/v1/orders"; tg.URL != want || tg.Method != "POST" {
			t.Fatalf("order %d: %s %s, want POST %s", n, tg.Method, tg.URL, want)
		}
		k := tg.Header.Get("Idempotency-Key")
		if keys[k] || tg.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("order %d: key %q repeated or headers %v", n, k, tg.Header)
		}
		keys[k] = true
		var o order
		if err := json.Unmarshal(tg.Body, &o); err != nil || len(o.Lines) != 1 || o.Lines[0].Quantity != 1 || o.HoldSeconds != 60 {
			t.Fatalf("order %d: body %s (%v)", n, tg.Body, err)
		}
		skus[o.Lines[0].SKU]++
	}
	for _, s := range c.SKUs {
		if skus[s] < 50 { // 100 expected each
			t.Errorf("SKU %s drawn %d times of 400: %v", s, skus[s], skus)
		}
	}
}

func TestSummarize(t *testing.T) {
	var m vegeta.Metrics
	start := time.Unix(1000, 0)
	for i := range 10 {
		code := uint16(201)
		if i >= 8 {
			code = 503
		}
		m.Add(&vegeta.Result{Code: code, Timestamp: start.Add(time.Duration(i) * 100 * time.Millisecond), Latency: 100 * time.Millisecond})
	}
	m.Close()
	r := summarize(&m, 7)
	// First request at 0, last at 0.9 s answered at 1.0 s: 8 created in 1 s.
	if r.Created != 8 || r.OrdersPerS != 8 || r.DurationS != 1 || r.Requests != 10 || r.Status["503"] != 2 || r.WarmupCreated != 7 || r.LatencyMs.P50 != 100 {
		t.Errorf("summary %+v", r)
	}
}

func TestValidate(t *testing.T) {
	ok := Config{URLs: []string{"http://a"}, SKUs: []string{"s"}, Workers: 1, Window: time.Second, RequestTimeout: time.Second, KeyPrefix: "k"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"no URLs": func(c *Config) { c.URLs = nil }, "no SKUs": func(c *Config) { c.SKUs = nil },
		"no workers": func(c *Config) { c.Workers = 0 }, "no window": func(c *Config) { c.Window = 0 },
		"no prefix": func(c *Config) { c.KeyPrefix = "" },
	} {
		c := ok
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

package judge

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// TestTargeter checks the attack's orders: round-robin over the URLs, a
// fresh key each, one-unit single-line bodies over every SKU, the SKU's
// index in the URL's fragment.
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
		if want := c.URLs[n%3] + "/v1/orders#"; !strings.HasPrefix(tg.URL, want) || tg.Method != "POST" {
			t.Fatalf("order %d: %s %s, want POST %s…", n, tg.Method, tg.URL, want)
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
		if k, ok := skuIndex(tg.URL); !ok || c.SKUs[k] != o.Lines[0].SKU {
			t.Fatalf("order %d: URL %s names SKU %d, body %s", n, tg.URL, k, o.Lines[0].SKU)
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
	tl := newTallied(1)
	start := time.Unix(1000, 0)
	for i := range 10 {
		r := &vegeta.Result{Code: 201, Timestamp: start.Add(time.Duration(i) * 100 * time.Millisecond), Latency: 100 * time.Millisecond}
		switch i {
		case 7:
			r.Code = 409
		case 8:
			r.Code = 503
		case 9:
			r.Code, r.Error = 0, "timeout"
		}
		tl.add(r)
	}
	tl.end()
	r := tl.summarize()
	// First request at 0, last at 0.9 s answered at 1.0 s: 7 created in 1 s;
	// the 503 and the unanswered one may each have reserved, the 409 not.
	if r.Created != 7 || r.OrdersPerS != 7 || r.DurationS != 1 || r.Requests != 10 || r.Status["503"] != 1 || r.Unsettled != 2 ||
		r.LatencyMs.P50 != 100 || r.CreatedLatencyMs.Count != 7 || math.Abs(r.CreatedLatencyMs.P99-100) > 0.1 {
		t.Errorf("summary %+v", r)
	}
}

// TestTurnsSpan: the time of attacks in turns is their own spans, not the
// gaps between them, where the other side was served.
func TestTurnsSpan(t *testing.T) {
	tl := newTallied(1)
	for turn := range 2 {
		start := time.Unix(1000+int64(turn)*60, 0)
		for i := range 5 {
			tl.add(&vegeta.Result{Code: 201, Timestamp: start.Add(time.Duration(i) * 100 * time.Millisecond), Latency: 100 * time.Millisecond})
		}
		tl.end()
	}
	if r := tl.summarize(); r.DurationS != 1 || r.Created != 10 || r.OrdersPerS != 10 || fmt.Sprint(r.TurnsPerS) != "[10 10]" {
		t.Errorf("two turns of 0.5 s a minute apart: %+v, want 10 created in 1 s, 10/s a turn", r)
	}
}

// TestCreatedLatency: the 201s' own p99 is not lowered by fast refusals,
// which vegeta's p99 of every answer is: 8 of 500 orders placed take
// 150 ms (1.6 %), the other answers 10 ms or, shed, 1 ms.
func TestCreatedLatency(t *testing.T) {
	tl := newTallied(1)
	start := time.Unix(1000, 0)
	for i := range 1000 {
		r := &vegeta.Result{Code: 201, Timestamp: start.Add(time.Duration(i) * time.Millisecond), Latency: 10 * time.Millisecond}
		switch {
		case i%2 == 1:
			r.Code, r.Latency = 503, time.Millisecond
		case i < 16:
			r.Latency = 150 * time.Millisecond
		}
		tl.add(r)
	}
	tl.end()
	r := tl.summarize()
	if math.Abs(r.CreatedLatencyMs.P99-150) > 0.2 || r.LatencyMs.P99 > 10 {
		t.Errorf("p99 of 201s %.1f ms (want 150), of all answers %.1f ms (want ≤ 10)", r.CreatedLatencyMs.P99, r.LatencyMs.P99)
	}
}

// TestAllAnswersLatencyHasNoP999: vegeta computes no p99.9 of every
// answer, so latency_ms has none, rather than a 0 below its own p99; the
// 201s' latency, from the HDR histogram, has a true one.
func TestAllAnswersLatencyHasNoP999(t *testing.T) {
	tl := newTallied(1)
	start := time.Unix(1000, 0)
	for i := range 2000 {
		tl.add(&vegeta.Result{Code: 201, Timestamp: start.Add(time.Duration(i) * time.Millisecond), Latency: time.Duration(1+i%50) * time.Millisecond})
	}
	tl.end()
	b, err := json.Marshal(tl.summarize())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		LatencyMs        map[string]float64 `json:"latency_ms"`
		CreatedLatencyMs map[string]float64 `json:"created_latency_ms"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if p999, ok := got.LatencyMs["p999"]; ok || got.LatencyMs["p99"] != 50 {
		t.Errorf("latency_ms %v: want a p99 of 50 ms and no p999 (written %v)", got.LatencyMs, p999)
	}
	if got.CreatedLatencyMs["p999"] < got.CreatedLatencyMs["p99"] || got.CreatedLatencyMs["p999"] <= 0 {
		t.Errorf("created_latency_ms %v: want its p999", got.CreatedLatencyMs)
	}
}

// TestAnswersBySKU: each SKU's 201s and unsettled answers, warm-up and
// window together, are the service's own counts of them, and add up to
// the answers in all.
func TestAnswersBySKU(t *testing.T) {
	var mu sync.Mutex
	created, unsettled := map[string]int64{}, map[string]int64{}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o order
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil || len(o.Lines) != 1 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch n.Add(1) % 5 {
		case 0:
			unsettled[o.Lines[0].SKU]++
			w.WriteHeader(http.StatusServiceUnavailable)
		case 1:
			w.WriteHeader(http.StatusConflict) // settled: no unit
		default:
			created[o.Lines[0].SKU]++
			w.WriteHeader(http.StatusCreated)
		}
	}))
	defer srv.Close()
	skus := []string{"s0", "s1", "s2"}
	res, err := Attack(context.Background(), Config{URLs: []string{srv.URL}, SKUs: skus, Workers: 4, Warmup: 100 * time.Millisecond,
		Window: 200 * time.Millisecond, KeyPrefix: "k", RequestTimeout: time.Second, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	var sumCreated, sumUnsettled int64
	for i, sku := range skus {
		a := res.BySKU[i]
		if a.Created != created[sku] || a.Unsettled != unsettled[sku] || a.Created < 1 {
			t.Errorf("%s: %+v, the service counted %d 201s, %d 503s", sku, a, created[sku], unsettled[sku])
		}
		sumCreated, sumUnsettled = sumCreated+a.Created, sumUnsettled+a.Unsettled
	}
	if sumCreated != res.WarmupCreated+res.Created || sumUnsettled != res.WarmupUnsettled+res.Unsettled {
		t.Errorf("by SKU %d created, %d unsettled; in all %+v", sumCreated, sumUnsettled, res)
	}
}

// TestAttackCountsTheWarmup: the warm-up's 201s and unsettled answers are
// kept apart from the window's, for the readback's bound.
func TestAttackCountsTheWarmup(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%4 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	res, err := Attack(context.Background(), Config{URLs: []string{srv.URL}, SKUs: []string{"s"}, Workers: 2, Warmup: 200 * time.Millisecond,
		Window: 200 * time.Millisecond, KeyPrefix: "k", RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	total := res.WarmupCreated + res.WarmupUnsettled + res.Created + res.Unsettled
	if res.WarmupCreated < 1 || res.WarmupUnsettled < 1 || res.Unsettled != int64(res.Status["503"]) || total != n.Load() {
		t.Errorf("%+v: %d requests served", res, n.Load())
	}
}

// TestTurns: the sides alternate, each turn a settle and a measured part,
// in the order A B, B A, A B; each side's result counts only its own
// measured answers, and its settles join its warm-up's.
func TestTurns(t *testing.T) {
	var log []string // "A+" as a turn of A starts, "A-" as it ends
	var served [2]atomic.Int64
	srv := func(i int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served[i].Add(1)
			w.WriteHeader(http.StatusCreated)
		}))
	}
	a, b := srv(0), srv(1)
	defer a.Close()
	defer b.Close()
	var sides []*Side
	var turners []Turner
	for _, u := range []string{a.URL, b.URL} {
		sd, err := NewSide(Config{URLs: []string{u}, SKUs: []string{"s"}, Workers: 2, Window: time.Second, KeyPrefix: "k", RequestTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer sd.Close()
		sides, turners = append(sides, sd), append(turners, sd)
	}
	err := Turns(context.Background(), turners, Schedule{Warmup: 100 * time.Millisecond, Window: 3 * 200 * time.Millisecond, Turns: 3,
		Settle: 50 * time.Millisecond, OnTurn: func(i int, begin bool) {
			log = append(log, "AB"[i:i+1]+map[bool]string{true: "+", false: "-"}[begin])
		}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "A+ A- B+ B- B+ B- A+ A- A+ A- B+ B-"; strings.Join(log, " ") != want {
		t.Errorf("turns %v, want %s", log, want)
	}
	for i, sd := range sides {
		r := sd.Result()
		if r.Created < 1 || r.WarmupCreated < 1 || r.Created+r.WarmupCreated != served[i].Load() || len(r.TurnsPerS) != 3 {
			t.Errorf("side %d: %d created in %d turns, %d in warm-up and settles, %d served", i, r.Created, len(r.TurnsPerS), r.WarmupCreated, served[i].Load())
		}
		// Three turns of 0.2 s: their spans, not the other side's turns
		// and the settles between them.
		if r.DurationS < 0.59 || r.DurationS > 0.75 {
			t.Errorf("side %d measured %.3f s, want about 0.6", i, r.DurationS)
		}
	}
}

// pausing is a Turner that records its calls.
type pausing struct{ calls *[]string }

func (p pausing) Run(_ context.Context, d time.Duration, measured bool) error {
	*p.calls = append(*p.calls, fmt.Sprintf("run %v %v", d, measured))
	return nil
}

func (p pausing) Pause(context.Context) error {
	*p.calls = append(*p.calls, "pause")
	return nil
}

// TestTurnsPause: with several sides each one's load is taken off after
// its warm-up and after each turn, so that no two overlap; alone, never.
func TestTurnsPause(t *testing.T) {
	var a, b []string
	err := Turns(context.Background(), []Turner{pausing{&a}, pausing{&b}}, Schedule{Warmup: time.Second, Window: 4 * time.Second, Turns: 2, Settle: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	want := "[run 1s false pause run 100ms false run 2s true pause run 100ms false run 2s true pause]"
	if fmt.Sprint(a) != want || fmt.Sprint(b) != want {
		t.Errorf("calls\n%v\n%v\nwant %s", a, b, want)
	}
	var alone []string
	if err := Turns(context.Background(), []Turner{pausing{&alone}}, Schedule{Warmup: time.Second, Window: 4 * time.Second, Turns: 1}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(alone) != "[run 1s false run 4s true]" {
		t.Errorf("alone: %v", alone)
	}
}

// TestTurnsRefusesShortTurns: a turn must dwarf its settle.
func TestTurnsRefusesShortTurns(t *testing.T) {
	var calls []string
	two := []Turner{pausing{&calls}, pausing{&calls}}
	for _, s := range []Schedule{
		{Window: time.Second, Turns: 3, Settle: 100 * time.Millisecond},
		{Window: time.Second, Turns: 0},
		{Window: 0, Turns: 1},
		{Window: time.Second, Turns: 1, Settle: -1},
	} {
		if err := Turns(context.Background(), two, s); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	if len(calls) > 0 {
		t.Errorf("refused schedules ran: %v", calls)
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

package run

import (
	"math"
	"reflect"
	"testing"
)

func testWorkload() Workload {
	return Workload{SKUs: 20, Stock: 100, Lines: Range{1, 3}, Qty: Range{1, 5}, Zipf: 1.1, RetryShare: 0.05, Seed: 42}
}

func TestParseRange(t *testing.T) {
	tests := []struct {
		in      string
		want    Range
		wantErr bool
	}{
		{"1..3", Range{1, 3}, false},
		{" 2 .. 2 ", Range{2, 2}, false},
		{"4", Range{4, 4}, false},
		{"3..1", Range{}, true},
		{"0..2", Range{}, true},
		{"a..2", Range{}, true},
		{"1..", Range{}, true},
		{"", Range{}, true},
	}
	for _, tt := range tests {
		got, err := parseRange(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseRange(%q) = %v, %v; want %v, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestWorkloadValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Workload)
	}{
		{"no skus", func(w *Workload) { w.SKUs = 0 }},
		{"negative stock", func(w *Workload) { w.Stock = -1 }},
		{"more lines than skus", func(w *Workload) { w.SKUs = 2; w.Lines = Range{3, 3} }},
		{"too many lines", func(w *Workload) { w.Lines = Range{1, 101} }},
		{"zero qty", func(w *Workload) { w.Qty = Range{0, 1} }},
		{"negative zipf", func(w *Workload) { w.Zipf = -0.5 }},
		{"nan zipf", func(w *Workload) { w.Zipf = math.NaN() }},
		{"retry share above 1", func(w *Workload) { w.RetryShare = 1.5 }},
	}
	if err := testWorkload().Validate(); err != nil {
		t.Fatalf("valid workload: %v", err)
	}
	for _, tt := range tests {
		w := testWorkload()
		tt.mod(&w)
		if err := w.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil, want an error", tt.name)
		}
	}
}

func TestGenerateSameSeedSameOrders(t *testing.T) {
	w := testWorkload()
	a, err := w.Generate(5000)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := w.Generate(5000)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed gave different orders")
	}
	w.Seed = 43
	c, _ := w.Generate(5000)
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds gave the same orders")
	}
	// A shorter run is a prefix of a longer one: the seed fixes the sequence.
	d, _ := testWorkload().Generate(100)
	if !reflect.DeepEqual(a[:100], d) {
		t.Fatal("Generate(100) is not a prefix of Generate(5000)")
	}
}

func TestGenerateShape(t *testing.T) {
	w := testWorkload()
	w.Lines, w.Qty = Range{2, 4}, Range{3, 7}
	orders, err := w.Generate(3000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range orders {
		if n := len(o.Lines); n < 2 || n > 4 {
			t.Fatalf("order %d has %d lines", o.Seq, n)
		}
		seen := map[int]bool{}
		for _, l := range o.Lines {
			if seen[l.SKU] {
				t.Fatalf("order %d repeats SKU %d", o.Seq, l.SKU)
			}
			seen[l.SKU] = true
			if l.SKU < 0 || l.SKU >= w.SKUs || l.Quantity < 3 || l.Quantity > 7 {
				t.Fatalf("order %d: bad line %+v", o.Seq, l)
			}
		}
	}
}

// skuShares returns each SKU's share of all lines.
func skuShares(orders []Order, k int) []float64 {
	counts := make([]float64, k)
	total := 0.0
	for _, o := range orders {
		for _, l := range o.Lines {
			counts[l.SKU]++
			total++
		}
	}
	for i := range counts {
		counts[i] /= total
	}
	return counts
}

func TestGenerateZipfSkew(t *testing.T) {
	w := testWorkload()
	w.Lines = Range{1, 1} // one line: shares follow the distribution exactly
	w.Zipf = 1.1
	orders, _ := w.Generate(50000)
	got := skuShares(orders, w.SKUs)
	// Expected share of SKU k is (1/(k+1)^s) / H where H = Σ 1/(i+1)^s.
	h := 0.0
	for i := range w.SKUs {
		h += 1 / math.Pow(float64(i+1), w.Zipf)
	}
	for _, k := range []int{0, 1, 4, 19} {
		want := 1 / math.Pow(float64(k+1), w.Zipf) / h
		if math.Abs(got[k]-want) > 0.01 {
			t.Errorf("zipf 1.1: SKU %d share %.4f, want %.4f ± 0.01", k, got[k], want)
		}
	}
	if got[0] < 10*got[19] {
		t.Errorf("zipf 1.1: hottest SKU share %.4f is not ≫ coldest %.4f", got[0], got[19])
	}

	w.Zipf = 0
	uni := skuShares(must(w.Generate(50000)), w.SKUs)
	for k, s := range uni {
		if math.Abs(s-0.05) > 0.006 {
			t.Errorf("uniform: SKU %d share %.4f, want 0.05 ± 0.006", k, s)
		}
	}
}

func TestGenerateHeavySkewStillDistinct(t *testing.T) {
	w := testWorkload()
	w.SKUs, w.Lines, w.Zipf = 3, Range{3, 3}, 10 // nearly always SKU 0: relies on the fill
	for _, o := range must(w.Generate(200)) {
		if len(o.Lines) != 3 {
			t.Fatalf("order %d: %d lines, want 3", o.Seq, len(o.Lines))
		}
	}
}

func TestGenerateRetryShare(t *testing.T) {
	for _, share := range []float64{0, 0.05, 0.5, 1} {
		w := testWorkload()
		w.RetryShare = share
		n := 0
		orders := must(w.Generate(20000))
		for _, o := range orders {
			if o.Retry {
				n++
			}
		}
		got := float64(n) / float64(len(orders))
		if math.Abs(got-share) > 0.01 {
			t.Errorf("retry share %.2f: got %.4f", share, got)
		}
	}
}

func TestGenerateBounds(t *testing.T) {
	w := testWorkload()
	if _, err := w.Generate(MaxOrders + 1); err == nil {
		t.Error("Generate(MaxOrders+1) = nil error")
	}
	if o, err := w.Generate(0); err != nil || len(o) != 0 {
		t.Errorf("Generate(0) = %d orders, %v", len(o), err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

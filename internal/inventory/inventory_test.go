package inventory

import (
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestNewAudit(t *testing.T) {
	cases := []struct {
		name                            string
		received, held, sold, available int64
		oversold, lost                  int64
		consistent                      bool
	}{
		{"consistent", 10, 3, 2, 5, 0, 0, true},
		{"oversold by a lost update", 10, 8, 4, 0, 2, -2, false},
		{"units vanished", 10, 2, 0, 5, 0, 3, false},
		{"sold out", 5, 0, 5, 0, 0, 0, true},
	}
	for _, c := range cases {
		a := NewAudit("s", c.received, c.held, c.sold, c.available)
		if a.Oversold != c.oversold || a.LostUnits != c.lost || a.Consistent != c.consistent {
			t.Errorf("%s: %+v, want oversold %d lost %d consistent %v", c.name, a, c.oversold, c.lost, c.consistent)
		}
	}
}

func TestValidate(t *testing.T) {
	line := func(sku string, q int64) LineRequest { return LineRequest{SKU: sku, Quantity: q} }
	cases := []struct {
		name string
		req  PlaceRequest
		ok   bool
	}{
		{"one line", PlaceRequest{Lines: []LineRequest{line("a", 1)}}, true},
		{"sku charset", PlaceRequest{Lines: []LineRequest{line("A9._:-x", MaxQuantity)}}, true},
		{"no lines", PlaceRequest{}, false},
		{"zero qty", PlaceRequest{Lines: []LineRequest{line("a", 0)}}, false},
		{"qty too big", PlaceRequest{Lines: []LineRequest{line("a", MaxQuantity+1)}}, false},
		{"dup sku", PlaceRequest{Lines: []LineRequest{line("a", 1), line("a", 2)}}, false},
		{"leading dot", PlaceRequest{Lines: []LineRequest{line(".a", 1)}}, false},
		{"slash", PlaceRequest{Lines: []LineRequest{line("a/b", 1)}}, false},
		{"65 chars", PlaceRequest{Lines: []LineRequest{line(strings.Repeat("a", 65), 1)}}, false},
		{"hold too long", PlaceRequest{Lines: []LineRequest{line("a", 1)}, Hold: MaxHold + time.Second}, false},
		{"long key", PlaceRequest{Lines: []LineRequest{line("a", 1)}, IdempotencyKey: strings.Repeat("k", 256)}, false},
		{"printable key", PlaceRequest{Lines: []LineRequest{line("a", 1)}, IdempotencyKey: "!~ k-1"}, true},
		{"non-UTF-8 key", PlaceRequest{Lines: []LineRequest{line("a", 1)}, IdempotencyKey: "k\xff"}, false},
		{"control byte in key", PlaceRequest{Lines: []LineRequest{line("a", 1)}, IdempotencyKey: "k\x00"}, false},
		{"non-ASCII key", PlaceRequest{Lines: []LineRequest{line("a", 1)}, IdempotencyKey: "clé"}, false},
	}
	for _, c := range cases {
		err := c.req.Validate()
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: Validate = %v, want ok=%v", c.name, err, c.ok)
		}
	}
	r := PlaceRequest{Lines: []LineRequest{line("a", 1)}}
	if err := r.Validate(); err != nil || r.Hold != DefaultHold {
		t.Errorf("default hold = %v, %v", r.Hold, err)
	}
}

// TestValidateStockLevels: available is bounded by MaxStock; an
// expectation by nothing but its sign, since cancels and PUTs take the
// counters a GET shows past MaxStock. Each is named in its refusal; an
// expectation not given is not checked.
func TestValidateStockLevels(t *testing.T) {
	if err := ValidateExpectation(StockExpectation{}); err != nil {
		t.Errorf("no expectation: %v", err)
	}
	for _, n := range []int64{-1, 0, 1, MaxStock, MaxStock + 1, math.MaxInt64} {
		for field, check := range map[string]func(int64) error{
			"available":        ValidateStock,
			"expect_available": func(n int64) error { return ValidateExpectation(StockExpectation{Available: &n}) },
			"expect_received":  func(n int64) error { return ValidateExpectation(StockExpectation{Received: &n}) },
		} {
			ok := n >= 0 && (n <= MaxStock || field != "available")
			err := check(n)
			if (err == nil) != ok || err != nil && (!errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "invalid request: "+field+" ")) {
				t.Errorf("%s %d: %v, want ok=%v", field, n, err, ok)
			}
		}
	}
}

// TestValidateIdempotencyKey: a key HTTP would carry changed is refused.
// Spaces at either end are dropped from a header value on the way, so
// " cart-7 " would be stored as another order's "cart-7".
func TestValidateIdempotencyKey(t *testing.T) {
	for key, ok := range map[string]bool{
		"k": true, "~": true, "!": true, "cart 7": true, "a b": true, "! ~": true,
		strings.Repeat("k", MaxIdempotency): true, "!" + strings.Repeat(" ", MaxIdempotency-2) + "~": true,
		"": false, strings.Repeat("k", MaxIdempotency+1): false, "k\x00": false, "k\x7f": false, "k\xff": false, "k\t": false,
		" ": false, "   ": false, " cart-7": false, "cart-7 ": false, " cart-7 ": false,
		" " + strings.Repeat("k", MaxIdempotency-1): false,
	} {
		err := ValidateIdempotencyKey(key)
		if (err == nil) != ok || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateIdempotencyKey(%q) = %v, want ok=%v", key, err, ok)
		}
	}
	for key, says := range map[string]string{"": "empty", " k": "space", "k ": "space", "   ": "space"} {
		if err := ValidateIdempotencyKey(key); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ValidateIdempotencyKey(%q) = %v, want a message saying %q", key, err, says)
		}
	}
}

func TestHashIsSemantic(t *testing.T) {
	a := PlaceRequest{Lines: []LineRequest{{"a", 1}, {"b", 2}}, Hold: DefaultHold}
	b := PlaceRequest{Lines: []LineRequest{{"a", 1}, {"b", 2}}, Hold: DefaultHold, IdempotencyKey: "k"}
	if a.Hash() != b.Hash() {
		t.Error("same request, different hash")
	}
	for _, other := range []PlaceRequest{
		{Lines: []LineRequest{{"a", 1}, {"b", 3}}, Hold: DefaultHold},
		{Lines: []LineRequest{{"a", 1}}, Hold: DefaultHold},
		{Lines: []LineRequest{{"a", 1}, {"b", 2}}, Hold: time.Minute},
		{Lines: []LineRequest{{"a1", 1}, {"b", 2}}, Hold: DefaultHold},
	} {
		if other.Hash() == a.Hash() {
			t.Errorf("%+v hashes like %+v", other, a)
		}
	}
}

// TestHashIsStable pins the digest of two requests: orders stored by an
// earlier version keep theirs, and a replay must still match it.
func TestHashIsStable(t *testing.T) {
	for _, c := range []struct {
		req  PlaceRequest
		want string
	}{
		{PlaceRequest{Lines: []LineRequest{{"a", 1}, {"sku-éü", 1234567}}, Hold: DefaultHold},
			"3225538eaad6d9cb82fe7568bb2afef4cafa679c7bac34669a633dad3bc3ac86"},
		{PlaceRequest{Lines: []LineRequest{{"x", 5}}, Hold: 90 * time.Second},
			"d04b41eb1f7153fb74014deef7a169f1574ecbd5fd54ad62c7df9ccee7470a2a"},
	} {
		if got := c.req.Hash(); got != c.want {
			t.Errorf("%+v: Hash = %s, want %s", c.req, got, c.want)
		}
	}
}

func TestErrorsMatchSentinels(t *testing.T) {
	if !errors.Is(&StockError{SKU: "a"}, ErrInsufficientStock) {
		t.Error("StockError is not ErrInsufficientStock")
	}
	if !errors.Is(&TransitionError{}, ErrInvalidTransition) {
		t.Error("TransitionError is not ErrInvalidTransition")
	}
	var ke *SKUError
	if err := error(&SKUError{SKU: "x", Err: ErrStaleFence}); !errors.Is(err, ErrStaleFence) || !errors.As(err, &ke) {
		t.Error("SKUError does not unwrap")
	}
}

// FuzzValidSKU holds the hand-written check to the pattern it documents.
func FuzzValidSKU(f *testing.F) {
	for _, s := range []string{"", "a", "A-1", "sku:1.2_3", "-a", ".a", "a b", "a\n", "é", "a\x00",
		strings.Repeat("a", 64), strings.Repeat("a", 65), "a" + strings.Repeat("-", 63)} {
		f.Add(s)
	}
	pattern := regexp.MustCompile(SKUPattern)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidateSKU(s) == nil, pattern.MatchString(s); got != want {
			t.Fatalf("ValidateSKU(%q) accepts = %v, the pattern = %v", s, got, want)
		}
	})
}

// TestLineErrorSaysItOnce: a bad SKU in a line is named with its line,
// and the answer says "invalid request" once, not once per layer.
func TestLineErrorSaysItOnce(t *testing.T) {
	r := PlaceRequest{Lines: []LineRequest{{SKU: "ok", Quantity: 1}, {SKU: "-bad", Quantity: 1}}}
	err := r.Validate()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate = %v, want ErrInvalid", err)
	}
	if msg := err.Error(); strings.Count(msg, ErrInvalid.Error()) != 1 || !strings.Contains(msg, `lines[1]: sku "-bad" must match`) {
		t.Fatalf("message %q: want the line and the rule, %q once", msg, ErrInvalid.Error())
	}
}

package reservation

import (
	"slices"
	"testing"
)

func TestMergeSorted(t *testing.T) {
	cases := []struct{ a, b, want []string }{
		{nil, nil, []string{}},
		{[]string{"a"}, nil, []string{"a"}},
		{[]string{"a", "c"}, []string{"b", "c", "d"}, []string{"a", "b", "c", "d"}},
		{[]string{"b"}, []string{"a"}, []string{"a", "b"}},
	}
	for _, c := range cases {
		if got := mergeSorted(c.a, c.b); !slices.Equal(got, c.want) {
			t.Errorf("mergeSorted(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

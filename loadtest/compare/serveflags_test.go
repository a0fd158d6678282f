package compare

import "testing"

func TestValidateServeFlags(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		ok    bool
	}{
		{nil, true},
		{[]string{"--coalesce=off"}, true},
		{[]string{"--coalesce-max-batch=16", "-chaos"}, true},
		{[]string{"coalesce=off"}, false},
		{[]string{"--"}, false},
		{[]string{"--lock=redis"}, false},
		{[]string{"--fencing=off"}, false},
		{[]string{"-addr=:1"}, false},
		{[]string{"--admin-token"}, false},
	} {
		if err := ValidateServeFlags(tc.flags); (err == nil) != tc.ok {
			t.Errorf("ValidateServeFlags(%q) = %v, want ok %v", tc.flags, err, tc.ok)
		}
	}
}

package compare

import (
	"strings"
	"testing"
)

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

func TestRecordedServeFlagsHidePasswords(t *testing.T) {
	got := redactAll([]string{"--database-url=postgres://u:s3cret@db:5432/x?sslmode=disable", "--coalesce=off"})
	if strings.Contains(strings.Join(got, " "), "s3cret") || got[1] != "--coalesce=off" {
		t.Errorf("recorded serve flags = %q: a password kept, or another flag changed", got)
	}
	if redactAll(nil) != nil {
		t.Error("no serve flags recorded as an empty list (omitempty would then print it)")
	}
}

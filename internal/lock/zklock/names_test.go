package zklock

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

func TestParseSeq(t *testing.T) {
	id := uuid.MustParse("6f1c2a9e-8a4b-4c1d-9e2f-0123456789ab")
	for _, tc := range []struct {
		name string
		want uint64
		ok   bool
	}{
		{nodePrefix(id) + "0000000000", 0, true},
		{nodePrefix(id) + "0000000042", 42, true},
		{nodePrefix(id) + "2147483647", 1<<31 - 1, true},
		// Past 2^31 the server's signed cversion prints negative; unsigned,
		// the order goes on: -2147483648 comes right after 2147483647.
		{nodePrefix(id) + "-2147483648", 1 << 31, true},
		{nodePrefix(id) + "-000000001", 1<<32 - 1, true},
		{"lock-0000000007", 7, true}, // zk.Lock's own nodes still count
		{nodePrefix(id) + "42", 0, false},
		{nodePrefix(id) + "00000000x1", 0, false},
		{"readme", 0, false},
	} {
		got, ok := parseSeq(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseSeq(%q) = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, good := range []string{"sku-1", "A.b:c_d", "x", strings.Repeat("k", maxKeyLen), "zookeeper", "é"} {
		if err := checkName(good); err != nil {
			t.Errorf("checkName(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "/", "a\x00b", "tab\t", "\u0085", "\uf000", "\ufffe",
		"sku-\U0001F600", string([]byte{0xff}), strings.Repeat("k", maxKeyLen+1)} {
		if err := checkName(bad); err == nil {
			t.Errorf("checkName(%q) = nil, want an error", bad)
		}
	}
}

// TestCheckNameMatchesTheServer asks the ensemble itself about names at
// the edges of checkName's rule: every name it accepts the server creates
// (a name it let through and the server refused would be a "retry later"
// forever, not ErrInvalidKey), and the names the server refuses it refuses.
// At the ends of the server's ranges, which the server leaves open, it is
// stricter.
func TestCheckNameMatchesTheServer(t *testing.T) {
	c := inspector(t, stacktest.RequireZK(t))
	root := testRoot + "-names"
	if _, err := c.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatalf("create %s: %v", root, err)
	}
	create := func(name string) error {
		path := root + "/" + name
		_, err := c.Create(path, nil, 0, zk.WorldACL(zk.PermAll))
		if err == nil || errors.Is(err, zk.ErrNodeExists) {
			_ = c.Delete(path, -1)
			return nil
		}
		return err
	}
	for _, name := range []string{"sku-1", "é", "\u00a0", "\ud7ff", "\uf900", "\uffef", strings.Repeat("k", maxKeyLen)} {
		if err := checkName(name); err != nil {
			t.Errorf("checkName(%q) = %v, want it accepted", name, err)
		} else if err := create(name); err != nil {
			t.Errorf("checkName accepts %q, the server refuses it: %v", name, err)
		}
	}
	for _, name := range []string{"sku-\U0001F600", "\U00010000", "\u0085", "\ue000", "\ufff5", "a\x01"} {
		if err := create(name); err == nil {
			t.Errorf("the server accepts %q: the case is no test of checkName", name)
		}
		if checkName(name) == nil {
			t.Errorf("checkName accepts %q, which the server refuses", name)
		}
	}
}

func TestCheckRoot(t *testing.T) {
	for _, good := range []string{"/stockguard/locks", "/a"} {
		if err := checkRoot(good); err != nil {
			t.Errorf("checkRoot(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", "/", "a/b", "/a/", "/a//b", "/a/../b"} {
		if err := checkRoot(bad); err == nil {
			t.Errorf("checkRoot(%q) = nil, want an error", bad)
		}
	}
}

func TestLocate(t *testing.T) {
	own := "_c_own-lock-0000000005"
	kids := []string{"_c_a-lock-0000000009", "_c_b-lock-0000000001", own, "_c_c-lock-0000000004",
		"_c_d-lock-0000000003", "stray"}
	got := locate(kids, own, 5)
	want := position{found: true, ahead: 3, behind: 1, pred: "_c_c-lock-0000000004"}
	if got != want {
		t.Fatalf("locate = %+v, want %+v", got, want)
	}
	if got := locate(kids[:2], own, 5); got.found {
		t.Fatalf("locate without own node = %+v", got)
	}
	if got := locate([]string{own}, own, 5); got != (position{found: true}) {
		t.Fatalf("locate alone = %+v", got)
	}
}

package backends_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stockguard/stockguard/internal/lock/backends"
)

func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, b := range backends.All() {
		if b.Name == "" || seen[b.Name] || b.New == nil {
			t.Errorf("row %+v: empty or repeated name, or no constructor", b)
		}
		seen[b.Name] = true
		if got, err := backends.Lookup(b.Name); err != nil || got.Name != b.Name {
			t.Errorf("Lookup(%q) = %v, %v", b.Name, got.Name, err)
		}
		if b.Fenced != backends.Fenced(b.Name) {
			t.Errorf("Fenced(%q) disagrees with its row", b.Name)
		}
		if b.Fenced && !b.Distributed {
			t.Errorf("%s: a token source shared by one process only fences nothing", b.Name)
		}
	}
	if _, err := backends.Lookup("memcached"); !errors.Is(err, backends.ErrConfig) {
		t.Errorf("Lookup(unknown) = %v, want ErrConfig", err)
	}
}

// The in-process rows need no server: their lockers must agree with the
// table about fencing (the networked rows are checked by cmd's e2e test).
func TestInProcessRowsAgree(t *testing.T) {
	for _, name := range []string{"none", "local"} {
		b, _ := backends.Lookup(name)
		l, err := b.New(context.Background(), backends.Params{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Fenced() != b.Fenced || l.Name() != name {
			t.Errorf("%s: locker says name %q fenced %v, table says fenced %v", name, l.Name(), l.Fenced(), b.Fenced)
		}
		_ = l.Close()
	}
}

func TestMissingAddresses(t *testing.T) {
	for _, name := range []string{"redis", "redlock", "zookeeper", "etcd"} {
		b, _ := backends.Lookup(name)
		if _, err := b.New(context.Background(), backends.Params{}); !errors.Is(err, backends.ErrConfig) {
			t.Errorf("%s without addresses: %v, want ErrConfig", name, err)
		}
	}
}

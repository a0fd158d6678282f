package client_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestReadme runs README.md's client example against the real service and
// checks that the README shows exactly the function example_test.go
// compiles.
func TestReadme(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "example_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fn string
	for _, d := range file.Decls {
		if f, ok := d.(*ast.FuncDecl); ok && f.Name.Name == "placeReplayConfirm" {
			fn = string(src[fset.Position(f.Pos()).Offset:fset.Position(f.End()).Offset])
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if fn == "" || !strings.Contains(string(readme), "```go\n"+fn+"\n```") {
		t.Fatalf("README.md lacks the example, as a go block:\n%s", fn)
	}

	f := newFixture(t)
	mustStock(t, f.newClient(), "widget-1", 5)
	// The example makes its own client, so its exchanges skip the spec
	// check; the other tests make the same calls through it.
	if err := placeReplayConfirm(context.Background(), f.url); err != nil {
		t.Fatalf("the README example: %v", err)
	}
	a, err := f.newClient().Audit(context.Background(), "widget-1")
	if err != nil || a.Sold != 2 || a.Held != 0 || !a.Consistent {
		t.Fatalf("after the example: %+v, %v", a, err)
	}
}

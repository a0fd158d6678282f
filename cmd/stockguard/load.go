package main

import (
	"context"
	"io"

	"github.com/stockguard/stockguard/loadtest"
)

// load is `stockguard load`: its usage errors are reported by loadtest
// itself and wrap errUsage and errReported.
func load(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return loadtest.Main(ctx, args, getenv, stdout, stderr)
}

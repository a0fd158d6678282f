package main

import (
	"context"
	"fmt"
	"io"
)

func load(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return fmt.Errorf("%w: load is not wired yet", errUsage)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/stockguard/stockguard/loadtest"
)

func load(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	err := loadtest.Main(ctx, args, getenv, stdout, stderr)
	if errors.Is(err, loadtest.ErrUsage) {
		// loadtest has printed the reason and its flags already.
		return fmt.Errorf("%w: %w: %w", errUsage, errReported, err)
	}
	return err
}

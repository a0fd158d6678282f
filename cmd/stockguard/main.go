// Command stockguard is the inventory reservation service (serve), its
// schema tool (migrate) and its load tester (load).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintln(os.Stderr, "stockguard:", err)
		}
		os.Exit(exitCode(err))
	}
}

var (
	errUsage = errors.New("usage")
	// errReported marks an error whose message the failing command printed itself.
	errReported = errors.New("reported")
)

func exitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

const usage = `usage: stockguard <command> [flags]

commands:
  serve     run the HTTP service
  migrate   apply database migrations and exit
  load      load tester: run, compare, chaos (stockguard load -h)
  version   print the version, commit and Go version

Every flag can also be set as STOCKGUARD_<FLAG> (dashes become underscores).
Run "stockguard <command> -h" for its flags.
`

// run is the whole program, with its environment passed in so tests can
// run it in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], getenv, stdout, stderr)
	case "migrate":
		return migrate(ctx, args[1:], getenv, stdout, stderr)
	case "load":
		return load(ctx, args[1:], getenv, stdout, stderr)
	case "version", "--version":
		return versionCmd(args[1:], getenv, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprintf(stderr, "stockguard: unknown command %q\n\n%s", args[0], usage)
		return errUsage
	}
}

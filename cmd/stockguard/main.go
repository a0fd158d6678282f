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

	"github.com/stockguard/stockguard/internal/cliflag"
	"github.com/stockguard/stockguard/loadtest"
	"github.com/stockguard/stockguard/loadtest/chaos"
)

func main() {
	var guard chaos.InterruptGuard
	ctx, cancel := context.WithCancel(chaos.WithInterruptGuard(context.Background(), &guard))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal asks the command to stop (a load run prints what
		// it measured); a second one kills as usual. Except once during a
		// chaos run's teardown (tens of seconds): killed then, it would
		// leave network namespaces, their nftables tables and scratch
		// directories until the next chaos run sweeps them, so the first
		// extra signal is held, with a message saying so. The one after it
		// kills: an operator must always be able to cut a hung teardown
		// short from the keyboard, and what it leaves is harmless (the
		// processes in the namespaces die with this one, the rules live
		// only inside them) and swept.
		//
		// Only SIGINT escalates: a repeated SIGTERM is a supervisor
		// signalling the process and then its group (timeout(1) does), the
		// same request again, and the stop it asked for is bounded
		// (serve's --shutdown-timeout); one that will not wait sends SIGKILL.
		<-sigs
		cancel()
		for sig := range sigs {
			if sig == syscall.SIGTERM || guard.Hold(os.Stderr) {
				continue
			}
			// The default action, as if the signal had never been caught.
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			if s, ok := sig.(syscall.Signal); ok {
				_ = syscall.Kill(os.Getpid(), s)
			}
			return
		}
	}()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	signal.Stop(sigs) // from here a signal kills at once
	cancel()
	if err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintln(os.Stderr, "stockguard:", err)
		}
		os.Exit(exitCode(err))
	}
}

var (
	errUsage = cliflag.ErrUsage
	// errReported marks an error whose message the failing command printed itself.
	errReported = cliflag.ErrReported
)

// Exit statuses; README's "Exit status" lists them.
const (
	exitFailure     = 1   // the command could not do its work
	exitUsage       = 2   // the command line or an environment value is wrong
	exitUnsafe      = 3   // a load command found units oversold or lost
	exitInterrupted = 130 // a load command was stopped by SIGINT (128 + 2, as shells report it)
)

func exitCode(err error) int {
	switch {
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, loadtest.ErrInterrupted):
		return exitInterrupted
	case errors.Is(err, loadtest.ErrUnsafe):
		return exitUnsafe
	}
	return exitFailure
}

const usage = `usage: stockguard <command> [flags]

commands:
  serve     run the HTTP service
  migrate   apply database migrations and exit (--reset-fences: to change --lock)
  load      load tester: run, compare, chaos (stockguard load -h)
  version   print the version, commit and Go version

Flags are written --flag=value or --flag value. serve's and migrate's flags
can also be set as STOCKGUARD_<FLAG> (dashes become underscores); the load
commands read STOCKGUARD_LOAD_<FLAG> for their own flags and serve's
variables for the connections (STOCKGUARD_REDIS_ADDRS, STOCKGUARD_DATABASE_URL).
Run "stockguard <command> --help" for its flags.

exit status: 0 done, 1 failed, 2 bad usage, 3 a load command found units
oversold or lost, 130 a load command was interrupted (Ctrl-C).
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

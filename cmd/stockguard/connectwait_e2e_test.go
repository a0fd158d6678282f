package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// TestSIGTERMWhileConnectingToTheDatabase: a database that accepts the TCP
// connection but never answers the startup handshake (a stuck proxy or
// load balancer) held serve and migrate in postgres.Open, deaf to SIGTERM.
// README ("Running the service"): SIGTERM before serve serves is a clean
// stop (`stopped while starting`, exit 0). migrate stops promptly too, but
// fails: a migration Job interrupted has applied nothing, and must not
// read as done.
func TestSIGTERMWhileConnectingToTheDatabase(t *testing.T) {
	for _, cmdline := range [][]string{
		{"serve", "--addr=127.0.0.1:0", "--lock=local"},
		{"migrate"},
	} {
		t.Run(cmdline[0], func(t *testing.T) {
			db := stacktest.Silent(t)
			cmd, stdout, logs, done := startStockguard(t, []string{
				"STOCKGUARD_DATABASE_URL=postgres://postgres@" + db + "/x?sslmode=disable", "STOCKGUARD_LOG_LEVEL=info"}, cmdline...)
			time.Sleep(2 * time.Second) // well into the connection attempt
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				got := exitStatus(t, err)
				switch {
				case cmdline[0] == "serve" && (got != 0 || !strings.Contains(logs.String(), "stopped while starting")):
					t.Errorf("serve exited %d after SIGTERM while starting, want 0 and a log line\n%s", got, logs)
				case cmdline[0] == "migrate" && got == 0:
					t.Errorf("migrate exited 0 after SIGTERM before it migrated anything\nstdout: %s\nstderr: %s", stdout, logs)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("%s still running 15 s after SIGTERM while connecting to the database (it ignores the signal until the connection answers)\nstderr:\n%s",
					cmdline[0], logs)
			}
		})
	}
}

package loadtest

import (
	"os"
	"testing"

	"github.com/stockguard/stockguard/loadtest/fakeservice"
)

// TestMain lets this test binary act as `stockguard serve` (the fake) when
// compare starts it as an instance.
func TestMain(m *testing.M) {
	if os.Getenv(fakeservice.Env) == "1" {
		os.Exit(fakeservice.ServeMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

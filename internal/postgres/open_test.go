package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/stack/stacktest"
)

// openBlocked runs Open(ctx, url) and returns its error and how long it
// took, failing the test if it has not returned within limit.
func openBlocked(t *testing.T, ctx context.Context, url string, limit time.Duration) (time.Duration, error) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		s, err := Open(ctx, url)
		if err == nil {
			_ = s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(limit):
		t.Fatalf("Open(%s) still blocked after %v", url, limit)
		return 0, nil
	}
}

// TestOpenHonoursContext: Open returns once its context ends, with its error
// (a stop, not a fault, to the caller), even when
// the database accepts the connection and never answers the handshake, so
// that a start stopped by SIGTERM stops.
func TestOpenHonoursContext(t *testing.T) {
	defer func(d time.Duration) { connectTimeout = d }(connectTimeout)
	connectTimeout = time.Minute // not what ends the attempt here
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	took, err := openBlocked(t, ctx, "postgres://postgres@"+stacktest.Silent(t)+"/x?sslmode=disable", 10*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open against a server that never answers = %v, want the context's error", err)
	}
	if took > 5*time.Second {
		t.Fatalf("Open with a 300 ms deadline returned after %v: %v", took, err)
	}
}

// TestConnectTimeout: a connection attempt no context bounds (database/sql
// opens some in the background) ends after connectTimeout, or after the
// URL's connect_timeout when it sets one.
func TestConnectTimeout(t *testing.T) {
	defer func(d time.Duration) { connectTimeout = d }(connectTimeout)
	addr := stacktest.Silent(t)
	for _, c := range []struct {
		def         time.Duration
		query       string
		least, most time.Duration
	}{
		{300 * time.Millisecond, "", 300 * time.Millisecond, 5 * time.Second},
		{time.Minute, "&connect_timeout=1", time.Second, 6 * time.Second},
	} {
		connectTimeout = c.def
		took, err := openBlocked(t, context.Background(),
			"postgres://postgres@"+addr+"/x?sslmode=disable"+c.query, 10*time.Second)
		if err == nil || took < c.least || took > c.most {
			t.Errorf("default %v, URL %q: Open = %v after %v; want an error after %v to %v",
				c.def, c.query, err, took, c.least, c.most)
		}
	}
}

// TestOptionsSet: a parameter set in libpq's options is found in every
// spelling the server accepts, and only there.
func TestOptionsSet(t *testing.T) {
	for options, want := range map[string]bool{
		"":                               false,
		"-c statement_timeout=30s":       true,
		"-cstatement_timeout=30s":        true,
		"--statement_timeout=30s":        true,
		"--statement-timeout=30s":        true,
		"  -c\tStatement_Timeout=1min  ": true,
		"-c search_path=a\\ b -c statement_timeout=5":      true,
		"-c lock_timeout=1s":                               false,
		"-c idle_in_transaction_session_timeout=1s":        false,
		"-c statement_timeout":                             false, // no value: the server refuses it
		"-c search_path=statement_timeout=1":               false,
		"-c application_name=x\\ -c\\ statement_timeout=1": false,
	} {
		if got := optionsSet(options, "statement_timeout"); got != want {
			t.Errorf("optionsSet(%q) = %v, want %v", options, got, want)
		}
	}
}

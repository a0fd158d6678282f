package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stockguard/stockguard/internal/inventory"
)

func TestTranslate(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("pgx: %w", &pgconn.PgError{Code: code, Message: "m"}) }
	check := func(constraint string) error {
		return fmt.Errorf("pgx: %w", &pgconn.PgError{Code: "23514", Message: "m", ConstraintName: constraint})
	}
	opErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	cases := []struct {
		name string
		err  error
		want error // nil: a fault of ours, no sentinel; joined: each of them
	}{
		{"available check", check("skus_available_check"), inventory.ErrInsufficientStock},
		{"reserved check", check("skus_reserved_check"), inventory.ErrInsufficientStock},
		{"sold check", check("skus_sold_check"), inventory.ErrInsufficientStock},
		{"received check", check("skus_received_check"), inventory.ErrInsufficientStock},
		{"fence token check", check("skus_fence_token_check"), nil},
		{"order status check", check("orders_status_check"), nil},
		{"line quantity check", check("order_lines_quantity_check"), nil},
		{"deadlock", pg("40P01"), inventory.ErrConflict},
		{"serialization", pg("40001"), inventory.ErrConflict},
		{"not utf-8", pg("22021"), inventory.ErrInvalid},
		{"invalid text", pg("22P02"), inventory.ErrInvalid},
		{"too long", pg("22001"), inventory.ErrInvalid},
		{"out of range", pg("22003"), inventory.ErrInvalid},
		{"program limit", pg("54000"), inventory.ErrInvalid},
		{"statement timeout", pg("57014"), inventory.ErrStoreUnavailable},
		{"lock timeout", pg("55P03"), inventory.ErrStoreUnavailable},
		{"idle in transaction timeout", pg("25P03"), inventory.ErrStoreUnavailable},
		{"read only", pg("25006"), inventory.ErrStoreUnavailable},
		{"completion unknown", pg("40003"), errors.Join(inventory.ErrStoreUnavailable, inventory.ErrOutcomeUnknown)},
		{"connection failure", pg("08006"), inventory.ErrStoreUnavailable},
		{"too many connections", pg("53300"), inventory.ErrStoreUnavailable},
		{"disk full", pg("53100"), inventory.ErrStoreUnavailable},
		{"admin shutdown", pg("57P01"), inventory.ErrStoreUnavailable},
		{"cannot connect now", pg("57P03"), inventory.ErrStoreUnavailable},
		{"io error", pg("58030"), inventory.ErrStoreUnavailable},
		{"connect refused", &pgconn.ConnectError{Config: &pgconn.Config{}}, inventory.ErrStoreUnavailable},
		{"connection reset", fmt.Errorf("read: %w", opErr), inventory.ErrStoreUnavailable},
		{"unexpected eof", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), inventory.ErrStoreUnavailable},
		{"bad conn", driver.ErrBadConn, inventory.ErrStoreUnavailable},
		{"conn closed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), inventory.ErrStoreUnavailable},
		{"foreign key (the schema has none)", pg("23503"), nil},
		{"syntax error", pg("42601"), nil},
		{"undefined table (schema not migrated)", pg("42P01"), inventory.ErrStoreUnavailable},
		{"undefined column (schema behind the binary)", pg("42703"), inventory.ErrStoreUnavailable},
		{"plain", errors.New("boom"), nil},
	}
	sentinels := []error{inventory.ErrUnknownSKU, inventory.ErrInsufficientStock, inventory.ErrConflict, inventory.ErrInvalid,
		inventory.ErrStoreUnavailable, inventory.ErrOutcomeUnknown}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := translate(context.Background(), "op", c.err)
			if !errors.Is(got, c.err) {
				t.Errorf("translate(%v) = %v: lost the cause", c.err, got)
			}
			for _, s := range sentinels {
				if want := errors.Is(c.want, s); errors.Is(got, s) != want {
					t.Errorf("translate(%v) = %v: errors.Is(%v) = %v, want %v", c.err, got, s, !want, want)
				}
			}
		})
	}
}

// A cancelled or timed-out request keeps its context's error, even when the
// driver reports it as a broken connection: the HTTP layer answers 499 or
// 503 timeout from it, not store_unavailable.
func TestTranslateKeepsContextErrors(t *testing.T) {
	for _, ctxErr := range []error{context.Canceled, context.DeadlineExceeded} {
		got := translate(context.Background(), "op", fmt.Errorf("%w: %w", ctxErr, io.ErrUnexpectedEOF))
		if !errors.Is(got, ctxErr) || errors.Is(got, inventory.ErrStoreUnavailable) {
			t.Errorf("translate(%v) = %v", ctxErr, got)
		}
	}
	// The server's answer to the cancel request a context's end sends
	// (cancelRequests) is the context's error too.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := translate(ctx, "op", &pgconn.PgError{Code: "57014", Message: "canceling statement due to user request"})
	if !errors.Is(got, context.Canceled) || errors.Is(got, inventory.ErrStoreUnavailable) {
		t.Errorf("translate(query_canceled, cancelled context) = %v", got)
	}
}

// retryable is an error pgx marks as failed before it was sent.
type retryable struct{ error }

func (retryable) SafeToRetry() bool { return true }

func TestUnanswered(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"statement error", &pgconn.PgError{Severity: "ERROR", Code: "23514"}, false},
		{"statement timeout", &pgconn.PgError{Severity: "ERROR", Code: "57014"}, false},
		{"session ended", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"unexpected eof", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), true},
		{"context ended", fmt.Errorf("timeout: %w", context.DeadlineExceeded), true},
		{"never sent", retryable{io.ErrUnexpectedEOF}, false},
		{"not the connection", errors.New("boom"), false},
	}
	for _, c := range cases {
		if got := unanswered(c.err); got != c.want {
			t.Errorf("%s: unanswered(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

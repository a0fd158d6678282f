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
	opErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	cases := []struct {
		name string
		err  error
		want error // nil: a fault of ours, no sentinel
	}{
		{"foreign key", pg("23503"), inventory.ErrUnknownSKU},
		{"check", pg("23514"), inventory.ErrInsufficientStock},
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
		{"syntax error", pg("42601"), nil},
		{"undefined column", pg("42703"), nil},
		{"plain", errors.New("boom"), nil},
	}
	sentinels := []error{inventory.ErrUnknownSKU, inventory.ErrInsufficientStock, inventory.ErrConflict, inventory.ErrInvalid,
		inventory.ErrStoreUnavailable}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := translate("op", c.err)
			if !errors.Is(got, c.err) {
				t.Errorf("translate(%v) = %v: lost the cause", c.err, got)
			}
			for _, s := range sentinels {
				if errors.Is(got, s) != (s == c.want) {
					t.Errorf("translate(%v) = %v: errors.Is(%v) = %v, want %v", c.err, got, s, !(s == c.want), s == c.want)
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
		got := translate("op", fmt.Errorf("%w: %w", ctxErr, io.ErrUnexpectedEOF))
		if !errors.Is(got, ctxErr) || errors.Is(got, inventory.ErrStoreUnavailable) {
			t.Errorf("translate(%v) = %v", ctxErr, got)
		}
	}
}

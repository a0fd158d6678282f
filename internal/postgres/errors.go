package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stockguard/stockguard/internal/inventory"
)

// translate turns driver errors into the domain's, once, here. Every error
// a caller sees is one of inventory's sentinels or, failing that, a fault
// of ours (a bug): the database being unreachable, full or slow is
// ErrStoreUnavailable, and input the database refuses is ErrInvalid.
func translate(op string, err error) error {
	// A request that was cancelled or ran out of time keeps its own error:
	// pgx wraps the context's, and the caller tells the two apart.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	// A connection that could not be made is the database being unavailable,
	// whatever the server said while refusing it (too many connections, a
	// database not accepting connections, a server starting up).
	var connect *pgconn.ConnectError
	if errors.As(err, &connect) {
		return fmt.Errorf("postgres: %s: %w: %w", op, inventory.ErrStoreUnavailable, err)
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		if sentinel := byCode(pg.Code); sentinel != nil {
			return fmt.Errorf("postgres: %s: %w: %w", op, sentinel, err)
		}
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	if unreachable(err) {
		return fmt.Errorf("postgres: %s: %w: %w", op, inventory.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// byCode maps a SQLSTATE to the domain's sentinel; nil for the codes that
// mean a fault of ours (a syntax error, a missing column).
func byCode(code string) error {
	switch code {
	case "23503": // foreign_key_violation: a line names a SKU that is gone
		return inventory.ErrUnknownSKU
	case "23514": // check_violation: a counter would go below zero
		return inventory.ErrInsufficientStock
	case "40P01", "40001": // deadlock_detected, serialization_failure: only unlocked writers (none, local) collide
		return inventory.ErrConflict
	case "22021", // character_not_in_repertoire: bytes that are not UTF-8
		"22P02", // invalid_text_representation
		"22001", // string_data_right_truncation
		"22003", // numeric_value_out_of_range
		"54000": // program_limit_exceeded: an array or a key too large
		return inventory.ErrInvalid
	case "57014", // query_canceled: statement_timeout (a cancelled context was caught above)
		"55P03", // lock_not_available: lock_timeout
		"25P03": // idle_in_transaction_session_timeout
		return inventory.ErrStoreUnavailable
	}
	switch code[:2] {
	case "08", // connection_exception
		"53", // insufficient_resources: too_many_connections, disk_full, out_of_memory
		"57", // operator_intervention: admin_shutdown, crash_shutdown, cannot_connect_now
		"58": // system_error: an I/O error on the server
		return inventory.ErrStoreUnavailable
	}
	return nil
}

// unreachable reports whether err, not from the server, says the server
// could not be reached or the connection broke.
func unreachable(err error) bool {
	var netErr net.Error
	switch {
	case errors.As(err, &netErr),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, pgconn.ErrConnClosed), pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	}
	return false
}

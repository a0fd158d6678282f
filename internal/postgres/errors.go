package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stockguard/stockguard/internal/inventory"
)

// translate turns driver errors into the domain's, once, here. Every error
// a caller sees is one of inventory's sentinels or, failing that, a fault
// of ours (a bug): the database being unreachable, full or slow is
// ErrStoreUnavailable, and input the database refuses is ErrInvalid. ctx is
// the context the statement ran under.
func translate(ctx context.Context, op string, err error) error {
	// A request that was cancelled or ran out of time keeps its own error:
	// pgx wraps the context's, and the caller tells the two apart.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	var pg *pgconn.PgError
	isPg := errors.As(err, &pg)
	// So it does when the server cancelled the statement at the request of
	// the context's end (cancelRequests): pgx then returns the server's
	// query_canceled, not the context's error.
	if ctxErr := ctx.Err(); ctxErr != nil && isPg && pg.Code == "57014" {
		return fmt.Errorf("postgres: %s: %w: %w", op, ctxErr, err)
	}
	// A connection that could not be made is the database being unavailable,
	// whatever the server said while refusing it (too many connections, a
	// database not accepting connections, a server starting up).
	var connect *pgconn.ConnectError
	if errors.As(err, &connect) {
		return fmt.Errorf("postgres: %s: %w: %w", op, inventory.ErrStoreUnavailable, err)
	}
	if isPg {
		if sentinel := byCode(pg); sentinel != nil {
			return fmt.Errorf("postgres: %s: %w: %w", op, sentinel, err)
		}
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	if unreachable(err) {
		return fmt.Errorf("postgres: %s: %w: %w", op, inventory.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// counterChecks are the CHECK constraints that keep the SKU counters at or
// above zero (migrations/00001_init.sql names none, so Postgres names them
// table_column_check). Only these mean a shortfall of stock; any other
// CHECK (an order's status, a fence token) refusing a row is a bug of ours.
var counterChecks = []string{"skus_available_check", "skus_reserved_check", "skus_sold_check", "skus_received_check"}

// errCompletionUnknown is the server saying it cannot tell whether the
// statement took effect.
var errCompletionUnknown = fmt.Errorf("%w: %w", inventory.ErrStoreUnavailable, inventory.ErrOutcomeUnknown)

// errSchemaBehind is a table or column this binary needs missing from the
// database.
var errSchemaBehind = fmt.Errorf("%w: the database schema is not migrated to this version (run stockguard migrate)", inventory.ErrStoreUnavailable)

// byCode maps the server's error to the domain's sentinel; nil for the
// codes that mean a fault of ours (a syntax error, a type mismatch).
func byCode(pg *pgconn.PgError) error {
	switch pg.Code {
	case "23514": // check_violation
		if slices.Contains(counterChecks, pg.ConstraintName) { // a counter would go below zero
			return inventory.ErrInsufficientStock
		}
		return nil
	// deadlock_detected, serialization_failure: writers no lock kept apart
	// (none, local). Locked writers that share idempotency keys only wait
	// for each other: they insert keys in one order (writeSQL).
	case "40P01", "40001":
		return inventory.ErrConflict
	case "22021", // character_not_in_repertoire: bytes that are not UTF-8
		"22P02", // invalid_text_representation
		"22001", // string_data_right_truncation
		"22003", // numeric_value_out_of_range
		"54000": // program_limit_exceeded: an array or a key too large
		return inventory.ErrInvalid
	case "57014", // query_canceled: statement_timeout (a cancel of ours was caught above)
		"55P03", // lock_not_available: lock_timeout
		"25P03", // idle_in_transaction_session_timeout
		"25006": // read_only_sql_transaction: a standby, a demoted primary, default_transaction_read_only
		return inventory.ErrStoreUnavailable
	case "40003": // statement_completion_unknown
		return errCompletionUnknown
	case "42P01", // undefined_table
		"42703": // undefined_column
		// The schema is behind this binary: serve --migrate=false started
		// before its migration job ran, or a rollout ran ahead of it. The
		// database is not ready for this instance (so /readyz says), which
		// is a 503 to retry, not a fault in the request.
		return errSchemaBehind
	}
	switch pg.Code[:2] {
	case "08", // connection_exception
		"53", // insufficient_resources: too_many_connections, disk_full, out_of_memory
		"57", // operator_intervention: admin_shutdown, crash_shutdown, cannot_connect_now
		"58": // system_error: an I/O error on the server
		return inventory.ErrStoreUnavailable
	}
	return nil
}

// unanswered reports whether err, from a statement that was sent, leaves
// open whether it took effect: the connection broke before the statement's
// answer came (or its context ended and the server did not confirm the
// cancel in time: cancelRequests), or the server ended the session, which a
// FATAL error can do after the commit, before the answer. Any other error
// the server sent for the statement means it failed; an error pgx deems
// safe to retry means it never left.
func unanswered(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Severity == "FATAL" || pg.Severity == "PANIC"
	}
	if pgconn.SafeToRetry(err) {
		return false
	}
	return unreachable(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
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

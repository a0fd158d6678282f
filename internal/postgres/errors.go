package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stockguard/stockguard/internal/inventory"
)

// translate turns driver errors into the domain's, once, here.
func translate(op string, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "23503": // foreign_key_violation: a line names a SKU that is gone
			return fmt.Errorf("postgres: %s: %w: %s", op, inventory.ErrUnknownSKU, pg.Detail)
		case "23514": // check_violation: a counter would go below zero
			return fmt.Errorf("postgres: %s: %w: %s", op, inventory.ErrInsufficientStock, pg.ConstraintName)
		case "40P01", "40001": // deadlock_detected, serialization_failure: only unlocked writers (none, local) collide
			return fmt.Errorf("postgres: %s: %w: %s", op, inventory.ErrConflict, pg.Message)
		}
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

-- Idempotency keys are no longer reserved by a 'pending' order row ahead of
-- the write: the order row that the write inserts is the key's only record
-- (internal/reservation/keys.go). Pending rows left by an older version are
-- keys of requests that never finished; dropping them frees those keys.
-- Not for a rolling upgrade: an instance of an older version still running
-- loses its in-flight keys and fails its keyed orders (README: stop them).
-- +goose Up
DELETE FROM orders WHERE status = 'pending';
DROP INDEX orders_pending_created_at;
ALTER TABLE orders DROP CONSTRAINT orders_status_check,
    ADD CONSTRAINT orders_status_check CHECK (status IN ('reserved', 'confirmed', 'cancelled', 'expired'));

-- +goose Down
ALTER TABLE orders DROP CONSTRAINT orders_status_check,
    ADD CONSTRAINT orders_status_check
        CHECK (status IN ('pending', 'reserved', 'confirmed', 'cancelled', 'expired'));
CREATE INDEX orders_pending_created_at ON orders (created_at) WHERE status = 'pending';

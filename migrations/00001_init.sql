-- +goose Up
-- Counters are never negative; received = available + reserved + sold is the
-- invariant the service keeps and the audit checks (not a CHECK here: the
-- unlocked demo backends must be able to break it, visibly).
CREATE TABLE skus (
    sku          text        PRIMARY KEY,
    available    bigint      NOT NULL DEFAULT 0 CHECK (available >= 0),
    reserved     bigint      NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    sold         bigint      NOT NULL DEFAULT 0 CHECK (sold >= 0),
    received     bigint      NOT NULL DEFAULT 0 CHECK (received >= 0),
    -- The fence of the last lease that claimed the row: token and lease id.
    fence_token  bigint      NOT NULL DEFAULT 0 CHECK (fence_token >= 0),
    fence_holder uuid,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE orders (
    id              uuid        PRIMARY KEY,
    idempotency_key text        UNIQUE,
    request_hash    text        NOT NULL,
    status          text        NOT NULL
        CHECK (status IN ('pending', 'reserved', 'confirmed', 'cancelled', 'expired')),
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
-- The reaper's scan: only live holds, by expiry.
CREATE INDEX orders_reserved_expires_at ON orders (expires_at) WHERE status = 'reserved';
CREATE INDEX orders_pending_created_at ON orders (created_at) WHERE status = 'pending';

CREATE TABLE order_lines (
    order_id    uuid   NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    sku         text   NOT NULL REFERENCES skus (sku),
    -- The line's place in the request, so an order reads back as it was sent.
    position    int    NOT NULL,
    quantity    bigint NOT NULL CHECK (quantity > 0),
    fence_token bigint NOT NULL,
    PRIMARY KEY (order_id, sku)
);
-- The audit sums lines per SKU.
CREATE INDEX order_lines_sku ON order_lines (sku);

-- +goose Down
DROP TABLE order_lines;
DROP TABLE orders;
DROP TABLE skus;

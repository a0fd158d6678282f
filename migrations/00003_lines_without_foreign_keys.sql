-- order_lines' foreign keys re-checked, line by line, what the one statement
-- that writes lines (writeSQL, internal/postgres/write.go) has just made
-- sure of: it inserts each line's order itself, and its guard aborts it
-- unless every SKU row it names was updated under its fence. The service
-- never deletes an order or a SKU. Each check was a query and a row lock per
-- line, run under the SKU's lease: about 17 µs an order of the hot SKU's
-- serial chain (BenchmarkCoalescedWrite, 64 orders: 3.0–3.6 ms a batch with
-- them, 2.2–2.3 ms without; loadtest/BENCH.md, twenty-seventh session).
-- +goose Up
ALTER TABLE order_lines DROP CONSTRAINT order_lines_order_id_fkey,
    DROP CONSTRAINT order_lines_sku_fkey;

-- +goose Down
ALTER TABLE order_lines
    ADD CONSTRAINT order_lines_order_id_fkey FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE,
    ADD CONSTRAINT order_lines_sku_fkey FOREIGN KEY (sku) REFERENCES skus (sku);

-- When the last accepted order of a finished sale was written (its stream
-- drained); NULL while the voucher's stream may still need a consumer.
ALTER TABLE vouchers ADD COLUMN drained_ms BIGINT;

-- One order per user and voucher for every write that asks for it
-- (guarded = 1, the safe strategies and the pipeline). The racy strategies
-- of the demo write with guarded = 0, exactly as the original experiment
-- does, so their one-order-per-user race reaches the database. SQLite
-- cannot drop a table constraint, so the table is rebuilt.
CREATE TABLE orders_new (
    id          BIGINT PRIMARY KEY,
    voucher_id  BIGINT NOT NULL REFERENCES vouchers (id),
    user_id     BIGINT NOT NULL,
    created_ms  BIGINT NOT NULL,
    guarded     BIGINT NOT NULL DEFAULT 1
);
INSERT INTO orders_new (id, voucher_id, user_id, created_ms, guarded)
    SELECT id, voucher_id, user_id, created_ms, 1 FROM orders;
DROP TABLE orders;
ALTER TABLE orders_new RENAME TO orders;
CREATE INDEX orders_by_voucher ON orders (voucher_id);
CREATE UNIQUE INDEX orders_one_per_user ON orders (user_id, voucher_id) WHERE guarded = 1;
CREATE INDEX orders_by_user ON orders (voucher_id, user_id);

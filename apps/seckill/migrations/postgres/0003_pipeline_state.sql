-- When the last accepted order of a finished sale was written (its stream
-- drained); NULL while the voucher's stream may still need a consumer.
ALTER TABLE vouchers ADD COLUMN drained_ms BIGINT;

-- One order per user and voucher for every write that asks for it
-- (guarded = 1, the safe strategies and the pipeline). The racy strategies
-- of the demo write with guarded = 0, exactly as the original experiment
-- does, so their one-order-per-user race reaches the database.
ALTER TABLE orders ADD COLUMN guarded BIGINT NOT NULL DEFAULT 1;
ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_user_id_voucher_id_key;
CREATE UNIQUE INDEX orders_one_per_user ON orders (user_id, voucher_id) WHERE guarded = 1;
CREATE INDEX orders_by_user ON orders (voucher_id, user_id);

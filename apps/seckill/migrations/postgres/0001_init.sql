-- Vouchers on sale and the orders written for them (PostgreSQL flavour).
CREATE TABLE vouchers (
    id          BIGSERIAL PRIMARY KEY,
    title       TEXT    NOT NULL,
    stock_total BIGINT  NOT NULL CHECK (stock_total >= 0),
    -- The database's own copy of the stock: the last line of defense,
    -- decremented by every written order and never allowed below zero.
    stock       BIGINT  NOT NULL CHECK (stock >= 0),
    begin_ms    BIGINT  NOT NULL,
    end_ms      BIGINT  NOT NULL,
    segments    BIGINT  NOT NULL,
    created_ms  BIGINT  NOT NULL,
    CHECK (end_ms > begin_ms)
);

CREATE TABLE orders (
    id          BIGINT PRIMARY KEY,
    voucher_id  BIGINT NOT NULL REFERENCES vouchers (id),
    user_id     BIGINT NOT NULL,
    created_ms  BIGINT NOT NULL,
    -- One order per user and voucher, whatever the gate in front says.
    UNIQUE (user_id, voucher_id)
);

CREATE INDEX orders_by_voucher ON orders (voucher_id);

-- Orders that were accepted by a gate but could not be written, with why.
CREATE TABLE failed_orders (
    id          BIGINT PRIMARY KEY,
    voucher_id  BIGINT NOT NULL,
    user_id     BIGINT NOT NULL,
    reason      TEXT   NOT NULL,
    created_ms  BIGINT NOT NULL
);

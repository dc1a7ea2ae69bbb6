-- The database stock may go below zero: the racy strategies of the demo
-- (`unsafe`, `local-mutex`) decrement it without a guard, as the original
-- experiment does, so their oversell shows as negative stock and more
-- orders than items. The other strategies guard every decrement with
-- `stock > 0` in the statement itself. SQLite cannot drop a CHECK
-- constraint, so the table is rebuilt.
CREATE TABLE vouchers_new (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    title       TEXT    NOT NULL,
    stock_total BIGINT  NOT NULL CHECK (stock_total >= 0),
    stock       BIGINT  NOT NULL,
    begin_ms    BIGINT  NOT NULL,
    end_ms      BIGINT  NOT NULL,
    segments    BIGINT  NOT NULL,
    created_ms  BIGINT  NOT NULL,
    CHECK (end_ms > begin_ms)
);
INSERT INTO vouchers_new SELECT id, title, stock_total, stock, begin_ms, end_ms, segments, created_ms FROM vouchers;
DROP TABLE vouchers;
ALTER TABLE vouchers_new RENAME TO vouchers;

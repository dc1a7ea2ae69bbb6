-- The database stock may go below zero: the racy strategies of the demo
-- (`unsafe`, `local-mutex`) decrement it without a guard, as the original
-- experiment does, so their oversell shows as negative stock and more
-- orders than items. The other strategies guard every decrement with
-- `stock > 0` in the statement itself.
ALTER TABLE vouchers DROP CONSTRAINT IF EXISTS vouchers_stock_check;

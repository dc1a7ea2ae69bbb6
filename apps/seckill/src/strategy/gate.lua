-- The flash-sale gate: one atomic step from "may this user buy?" to "order queued".
--
-- KEYS[1]  stock counter (string)            seckill:stock:{V}
-- KEYS[2]  buyers (set of user ids)          seckill:buyers:{V}
-- KEYS[3]  voucher meta (hash: begin, end)   seckill:voucher:{V}
-- KEYS[4]  order stream                      seckill:orders:{V}
-- KEYS[5]  pending orders (hash user -> order id) seckill:pending:{V}
-- ARGV[1]  user id
-- ARGV[2]  order id
-- ARGV[3]  voucher id
--
-- All keys carry the voucher id as hash tag, so the script runs on Redis
-- Cluster. The window is checked on the server's clock (TIME), not on the
-- callers' clocks.
--
-- The pending hash lets the buyer find the order before it is written, and
-- lets a caller whose reply was lost tell whether the script ran.
--
-- Returns 0 accepted (order appended to the stream), 1 sold out,
-- 2 already bought, 3 not started, 4 ended, 5 voucher state missing.
local meta = redis.call('HMGET', KEYS[3], 'begin', 'end')
local stock = redis.call('GET', KEYS[1])
if not meta[1] or not meta[2] or not stock then
  return 5
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(meta[1]) then
  return 3
end
if now >= tonumber(meta[2]) then
  return 4
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 2
end
if tonumber(stock) <= 0 then
  return 1
end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[4], '*', 'order_id', ARGV[2], 'user_id', ARGV[1], 'voucher_id', ARGV[3])
return 0

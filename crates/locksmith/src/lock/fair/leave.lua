-- A fair lock waiter gives up: it leaves the queue at once, and if the lock
-- is free, the waiter now at the head is told (it may have been waiting
-- behind the one that left).
-- KEYS[1]  lock hash
-- KEYS[2]  queue list
-- KEYS[3]  timeout zset
-- KEYS[4]  locksmith's own waiters' give-up times (see common.lua)
-- ARGV[1]  owner field
-- ARGV[2]  release channel prefix redisson_lock__channel:{NAME}
-- ARGV[3]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- ARGV[4]  the queue step (ms, see common.lua)
-- Returns 1 when the owner was queued, 0 when it was not.
local key, queue, timeouts, ours = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
local position = redis.call('lpos', queue, ARGV[1])
redis.call('zrem', timeouts, ARGV[1])
redis.call('zrem', ours, ARGV[1])
if position ~= false then
    redis.call('lrem', queue, 0, ARGV[1])
end
purge(queue, timeouts, ours, ARGV[4], now)
if position ~= false then
    -- The waiters left at the ends get their times (see common.lua).
    head_due(queue, timeouts, ours, ARGV[4], now)
    tail_due(queue, timeouts, ours, ARGV[4], now, false)
end
if redis.call('exists', key) == 0 then
    wake_head(queue, ARGV[2], '0', ARGV[3])
end
return position ~= false and 1 or 0

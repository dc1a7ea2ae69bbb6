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
-- ARGV[4]  the queue step (ms, see acquire.lua): with Redisson waiters in
--          line, the waiters behind the one leaving move one place up, as
--          Redisson's acquireFailed does
-- Returns 1 when the owner was queued, 0 when it was not.
local key, queue, timeouts, ours = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
local position = redis.call('lpos', queue, ARGV[1])
redis.call('zrem', timeouts, ARGV[1])
redis.call('zrem', ours, ARGV[1])
if position ~= false then
    redis.call('lrem', queue, 0, ARGV[1])
    local behind = redis.call('lrange', queue, position, -1)
    -- Waiters passed as dead first, so the ends' times count only the
    -- waiters left.
    purge(queue, timeouts, ours, now)
    if mixed(queue, timeouts, ours, now) then
        step_back(timeouts, ours, behind, ARGV[4], now)
    end
    ends_due(queue, timeouts, ours, ARGV[4], now)
else
    purge(queue, timeouts, ours, now)
end
if redis.call('exists', key) == 0 then
    wake_head(queue, ARGV[2], '0', ARGV[3])
end
return position ~= false and 1 or 0

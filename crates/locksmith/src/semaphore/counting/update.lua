-- Change a semaphore's permits and announce the new count
-- (Redisson-compatible: the message is the number of available permits,
-- which Redisson's waiters and ours use to decide how many to wake).
-- KEYS[1]  semaphore key (string: available permits)
-- KEYS[2]  channel redisson_sc:{NAME}
-- ARGV[1]  'add': add ARGV[2] (may be negative; release is a positive add),
--          creating the semaphore at 0 first if absent; answers the new count
--          'set': set ARGV[2] permits only if the semaphore does not exist;
--          answers 1 set, 0 it existed (unchanged)
--          'drain': take every available permit; answers how many (a negative
--          count is reset to 0 and answered, as Redisson and Java do)
-- ARGV[2]  the amount
-- ARGV[3]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- The key's TTL (if any) is kept. A value that is not a number fails with
-- WRONGTYPE and changes nothing.
local key, op, amount, mode = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local value = redis.call('get', key)
if value ~= false and tonumber(value) == nil then
    return redis.error_reply('WRONGTYPE semaphore value is not a number')
end
if op == 'add' then
    local now = redis.call('incrby', key, amount)
    announce(KEYS[2], now, mode)
    return now
elseif op == 'set' then
    if value ~= false then
        return 0
    end
    redis.call('set', key, amount)
    announce(KEYS[2], amount, mode)
    return 1
elseif op == 'drain' then
    if value == false then
        return 0
    end
    redis.call('set', key, 0, 'keepttl')
    return tonumber(value)
end
return redis.error_reply('ERR unknown semaphore operation ' .. tostring(op))

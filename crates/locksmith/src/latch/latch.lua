-- Count-down latch operations (Redisson-compatible layout: a string key
-- holding the count; messages '0' reached zero (wake every waiter) and
-- '1' a new count was set).
-- KEYS[1]  latch key
-- KEYS[2]  channel redisson_countdownlatch__channel__{NAME}
-- ARGV[1]  'set': set the count to ARGV[2] only if the latch does not exist;
--          answers 1 set, 0 it existed (unchanged)
--          'down': count down by one; at zero the key is deleted and '0'
--          announced; answers the count left (0 when it was already open)
--          'delete': delete the latch, waking every waiter; answers 1
--          deleted, 0 there was none
-- ARGV[2]  the count for 'set'
-- ARGV[3]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- A value that is not a number fails with WRONGTYPE and changes nothing.
local key, op, mode = KEYS[1], ARGV[1], ARGV[3]
local value = redis.call('get', key)
if value ~= false and tonumber(value) == nil then
    return redis.error_reply('WRONGTYPE latch value is not a number')
end
if op == 'set' then
    if value ~= false then
        return 0
    end
    redis.call('set', key, ARGV[2])
    announce(KEYS[2], '1', mode)
    return 1
elseif op == 'down' then
    if value == false then
        return 0
    end
    local left = redis.call('decr', key)
    if left <= 0 then
        redis.call('del', key)
        announce(KEYS[2], '0', mode)
        return 0
    end
    return left
elseif op == 'delete' then
    if redis.call('del', key) == 1 then
        announce(KEYS[2], '0', mode)
        return 1
    end
    return 0
end
return redis.error_reply('ERR unknown latch operation ' .. tostring(op))

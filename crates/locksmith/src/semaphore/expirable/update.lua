-- Operations on one permit-expirable semaphore (layout in expirable.lua).
-- KEYS[1]  semaphore key NAME
-- KEYS[2]  timeout zset {NAME}:timeout
-- KEYS[3]  channel redisson_sc:{NAME}
-- ARGV[1]  'release': give back permit ARGV[2] (hex id); answers 1 released
--          within its lease, 2 its lease had run out (given back now, but
--          its holder had lost it), 0 no such permit (never issued, or
--          expired and already returned)
--          'add': add ARGV[2] permits (may be negative); answers the count
--          'set': set ARGV[2] permits if the semaphore does not exist;
--          answers 1 set, 0 it existed
--          'available': answers the available count (after returning
--          expired permits)
--          'held': answers the number of permits held (unexpired)
-- ARGV[3]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
local key, timeouts, channel = KEYS[1], KEYS[2], KEYS[3]
local op, arg, mode = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms()
-- A released permit's own expiry is read before expired permits are
-- returned, so a release can tell "lease ran out" from "no such permit".
local id, expiry = nil, false
if op == 'release' then
    id = unhex(arg)
    expiry = redis.pcall('zscore', timeouts, id)
end
local ok, err = pcall(reclaim, key, timeouts, channel, now, mode)
if not ok then
    return redis.error_reply(type(err) == 'table' and err.err or tostring(err))
end
if op == 'release' then
    if type(expiry) ~= 'string' then
        return 0
    end
    if tonumber(expiry) <= now then
        -- Returned to the pool just now, with the other expired permits.
        return 2
    end
    redis.call('zrem', timeouts, id)
    local count = redis.call('incrby', key, 1)
    announce(channel, count, mode)
    return 1
elseif op == 'add' then
    local count = redis.call('incrby', key, arg)
    announce(channel, count, mode)
    return count
elseif op == 'set' then
    if redis.call('exists', key) == 1 then
        return 0
    end
    redis.call('set', key, arg)
    announce(channel, arg, mode)
    return 1
elseif op == 'available' then
    return tonumber(redis.call('get', key) or '0')
elseif op == 'held' then
    return redis.call('zcard', timeouts)
end
return redis.error_reply('ERR unknown semaphore operation ' .. tostring(op))

-- Take one permit with a lease from permit-expirable semaphores,
-- idempotently per permit id. Takes a batch of independent requests.
-- Per request i, in order:
--   KEYS  semaphore key NAME, timeout zset {NAME}:timeout
--   ARGV  permit id (32 hex digits, new per attempt), lease in milliseconds,
--         channel redisson_sc:{NAME}, how to announce ('p', 's', 'b')
-- Expired permits are returned to the pool first.
-- Returns one reply per request: {1, lease} taken now; {2, left} taken by an
-- earlier send of this attempt (its lease has left milliseconds); {0, wait}
-- no permit free, the nearest lease runs out in wait milliseconds (-1: none
-- is held, so only a release or an added permit can help; -2: the semaphore
-- was never set); {-2, error message} for a request that failed alone.
local function acquire(key, timeouts, hex, lease, channel, mode, now)
    reclaim(key, timeouts, channel, now, mode)
    local id = unhex(hex)
    local expiry = redis.call('zscore', timeouts, id)
    if expiry ~= false then
        return {2, math.max(0, tonumber(expiry) - now)}
    end
    local value = redis.call('get', key)
    if value == false then
        return {0, -2}
    end
    if tonumber(value) >= 1 then
        redis.call('decr', key)
        redis.call('zadd', timeouts, now + tonumber(lease), id)
        local ttl = redis.call('pttl', key)
        if ttl > 0 then
            redis.call('pexpire', timeouts, ttl)
        end
        return {1, tonumber(lease)}
    end
    local nearest = redis.call('zrange', timeouts, 0, 0, 'withscores')
    if nearest[2] ~= nil then
        return {0, math.max(0, tonumber(nearest[2]) - now)}
    end
    return {0, -1}
end

local now = now_ms()
return each_request(2, 4, function(k, a)
    return acquire(KEYS[k + 1], KEYS[k + 2], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
        ARGV[a + 4], now)
end)

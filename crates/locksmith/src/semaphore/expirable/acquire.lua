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
local out = {}
for i = 1, #KEYS / 2 do
    local ok, reply = pcall(acquire, KEYS[2 * i - 1], KEYS[2 * i], ARGV[4 * i - 3],
        ARGV[4 * i - 2], ARGV[4 * i - 1], ARGV[4 * i], now)
    if ok then
        out[i] = reply
    else
        out[i] = {-2, type(reply) == 'table' and reply.err or tostring(reply)}
    end
end
return out

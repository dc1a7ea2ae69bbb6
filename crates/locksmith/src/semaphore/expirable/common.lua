-- Shared prelude of the permit-expirable semaphore scripts (Redisson's
-- RPermitExpirableSemaphore layout): string NAME = available permits, zset
-- {NAME}:timeout = permit id (16 raw bytes; clients pass 32 hex digits)
-- -> expiry in epoch milliseconds. Expiry is measured on the server's
-- clock (TIME), never a client's.

-- The server's time in milliseconds.
local function now_ms()
    local t = redis.call('time')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- 32 hex digits -> the 16 raw bytes Redisson stores as the member.
local function unhex(hex)
    return (hex:gsub('..', function(cc) return string.char(tonumber(cc, 16)) end))
end

-- Returns permits whose lease ran out to the pool, announcing the new count
-- as Redisson does. Fails with WRONGTYPE, before changing anything, when the
-- count is not a number.
local function reclaim(key, timeouts, channel, now, mode)
    local value = redis.call('get', key)
    if value ~= false and tonumber(value) == nil then
        error({err = 'WRONGTYPE semaphore value is not a number'})
    end
    local expired = redis.call('zrangebyscore', timeouts, 0, now)
    if #expired > 0 then
        redis.call('zrem', timeouts, unpack(expired))
        local count = redis.call('incrby', key, #expired)
        if count > 0 then
            announce(channel, count, mode)
        end
    end
end


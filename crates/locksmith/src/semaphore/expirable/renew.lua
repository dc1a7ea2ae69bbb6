-- Renew permits of a permit-expirable semaphore: each is a member of the
-- semaphore's timeout zset whose score is its expiry in epoch ms on the
-- server's clock; each_hold() comes from engine/holds.lua. KEYS per hold:
-- the timeout zset; ARGV: the permit id as 32 hex digits, lease.
local now = nil
return each_hold(function(key, hex, lease)
    if now == nil then
        local t = redis.call('time')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local id = (hex:gsub('..', function(cc) return string.char(tonumber(cc, 16)) end))
    local expiry = redis.pcall('zscore', key, id)
    if type(expiry) ~= 'string' or tonumber(expiry) <= now then
        return 0
    end
    -- Extends, never shortens (an extend asks for a lease end; a later one
    -- stands).
    redis.call('zadd', key, 'xx', math.max(tonumber(expiry), now + lease), id)
    return 1
end)

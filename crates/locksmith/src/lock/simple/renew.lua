-- Renew simple locks: the key's value is the holder's token; each_hold()
-- comes from engine/holds.lua. KEYS per hold: the lock key; ARGV: token,
-- lease.
return each_hold(function(key, token, lease)
    if redis.pcall('get', key) ~= token then
        return 0
    end
    -- Extends, never shortens (an extend asks for a lease end; a later one
    -- stands).
    redis.call('pexpire', key, math.max(redis.call('pttl', key), lease))
    return 1
end)

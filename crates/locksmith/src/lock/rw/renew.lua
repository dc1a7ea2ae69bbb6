-- Renew an owner's read holds of a read-write lock: the owner's field
-- counts them, each has a {NAME}:<owner>:rwlock_timeout:<n> key, and the
-- hash lives as long as the longest hold in it; each_hold() comes from
-- engine/holds.lua. KEYS per hold: the lock hash; ARGV: owner, lease.
return each_hold(function(key, owner, lease)
    local count = tonumber(redis.pcall('hget', key, owner))
    if count == nil or count <= 0 then
        return 0
    end
    local prefix
    if key:find('{', 1, true) then
        prefix = key .. ':' .. owner .. ':rwlock_timeout'
    else
        prefix = '{' .. key .. '}:' .. owner .. ':rwlock_timeout'
    end
    -- Extends, never shortens (an extend asks for a lease end; a later one
    -- stands).
    for n = 1, count do
        local timeout = prefix .. ':' .. n
        redis.call('pexpire', timeout, math.max(redis.call('pttl', timeout), lease))
    end
    redis.call('pexpire', key, math.max(redis.call('pttl', key), lease))
    return 1
end)

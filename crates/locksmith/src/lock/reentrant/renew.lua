-- Renew holds recorded as a field of the lock hash (the lock, the fair
-- lock, a read-write lock's writer, a Redlock node); each_hold() comes
-- from engine/holds.lua. KEYS per hold: the lock hash; ARGV: owner field,
-- lease.
return each_hold(function(key, owner, lease)
    if redis.pcall('hexists', key, owner) ~= 1 then
        return 0
    end
    -- Extends, never shortens: the hash may also carry holds with longer
    -- leases (read holds beside the writer's field), which must not be cut.
    redis.call('pexpire', key, math.max(redis.call('pttl', key), lease))
    return 1
end)

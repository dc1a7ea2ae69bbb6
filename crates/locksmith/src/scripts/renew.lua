-- Renew many leases in one call (the watchdog's batch).
-- KEYS[i]  a lock key
-- ARGV     triples per key: kind ('h' = reentrant hash field, 's' = string
--          token), owner (field or token), lease in milliseconds
-- Extends only leases the owner still holds; never re-creates a lock.
-- Returns one integer per key: 1 renewed, 0 no longer held.
local out = {}
for i, key in ipairs(KEYS) do
    local kind = ARGV[3 * i - 2]
    local owner = ARGV[3 * i - 1]
    local lease = ARGV[3 * i]
    local ok = 0
    if kind == 'h' then
        if redis.pcall('hexists', key, owner) == 1 then
            redis.call('pexpire', key, lease)
            ok = 1
        end
    elseif redis.pcall('get', key) == owner then
        redis.call('pexpire', key, lease)
        ok = 1
    end
    out[i] = ok
end
return out

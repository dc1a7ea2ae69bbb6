-- Renew many leases in one call (the watchdog's batch).
-- KEYS[i]  a lock key
-- ARGV     triples per key: kind ('h' = reentrant hash field, 's' = string
--          token, 'r' = an owner's read holds of a read-write lock (its
--          field counts them; each has a {NAME}:<owner>:rwlock_timeout:<n>
--          key), 'z' = member of a permit-expirable semaphore's timeout
--          zset, its expiry an epoch-ms score on the server's clock), owner
--          (field, token, or permit id as 32 hex digits), lease in
--          milliseconds
-- Extends only leases the owner still holds; never re-creates a lock, and
-- never shortens a key's expiry.
-- Returns one integer per key: 1 renewed, 0 no longer held.
local now = nil
local out = {}
for i, key in ipairs(KEYS) do
    local kind = ARGV[3 * i - 2]
    local owner = ARGV[3 * i - 1]
    local lease = ARGV[3 * i]
    local ok = 0
    if kind == 'h' then
        if redis.pcall('hexists', key, owner) == 1 then
            -- Extends, never shortens: the hash may also carry holds with
            -- longer leases (a read-write lock's read holds beside the
            -- writer's field), which must not be cut.
            redis.call('pexpire', key, math.max(redis.call('pttl', key), tonumber(lease)))
            ok = 1
        end
    elseif kind == 'r' then
        local count = tonumber(redis.pcall('hget', key, owner))
        if count ~= nil and count > 0 then
            local prefix
            if key:find('{', 1, true) then
                prefix = key .. ':' .. owner .. ':rwlock_timeout'
            else
                prefix = '{' .. key .. '}:' .. owner .. ':rwlock_timeout'
            end
            for n = 1, count do
                redis.call('pexpire', prefix .. ':' .. n, lease)
            end
            redis.call('pexpire', key, math.max(redis.call('pttl', key), tonumber(lease)))
            ok = 1
        end
    elseif kind == 'z' then
        if now == nil then
            local t = redis.call('time')
            now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        end
        local id = (owner:gsub('..', function(cc) return string.char(tonumber(cc, 16)) end))
        local expiry = redis.pcall('zscore', key, id)
        if type(expiry) == 'string' and tonumber(expiry) > now then
            redis.call('zadd', key, 'xx', now + tonumber(lease), id)
            ok = 1
        end
    elseif redis.pcall('get', key) == owner then
        redis.call('pexpire', key, lease)
        ok = 1
    end
    out[i] = ok
end
return out

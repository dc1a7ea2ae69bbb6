-- Shared prelude of the read-write lock scripts (Redisson's
-- RReadWriteLock layout): hash NAME with field 'mode' = 'read' or 'write',
-- readers' fields <owner> = read hold count, the writer's field
-- <owner>:write = write hold count; each read hold n of an owner also has
-- the string {NAME}:<owner>:rwlock_timeout:<n> with its own PX lease, and
-- the hash's PX is the longest of them. Channel redisson_rwlock:{NAME}:
-- '1' after a write unlock, '0' after the last read unlock.

-- The prefix of an owner's read-hold timeout keys (Redisson's suffixName:
-- braces around NAME unless it has its own hash tag).
local function hold_prefix(key, owner)
    if key:find('{', 1, true) then
        return key .. ':' .. owner .. ':rwlock_timeout'
    end
    return '{' .. key .. '}:' .. owner .. ':rwlock_timeout'
end

-- The longest remaining lease among all read holds (-3 when none).
local function longest_read_hold(key)
    local longest = -3
    local fields = redis.call('hgetall', key)
    for i = 1, #fields, 2 do
        local count = tonumber(fields[i + 1])
        if fields[i] ~= 'mode' and count ~= nil and fields[i]:sub(-6) ~= ':write' then
            local prefix = hold_prefix(key, fields[i])
            for n = count, 1, -1 do
                longest = math.max(longest, redis.call('pttl', prefix .. ':' .. n))
            end
        end
    end
    return longest
end


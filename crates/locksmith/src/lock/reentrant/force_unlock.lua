-- Delete a lock regardless of its owner and wake its waiters.
-- KEYS[1]  lock key
-- KEYS[2]  release channel
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- ARGV[3]  the key's type for this kind of lock: 'hash' (a lock) or
--          'string' (a simple lock)
-- Returns 1 if a lock was deleted, 0 if there was none. A key of another
-- kind under the name (another type; for a lock, a read-write lock's hash;
-- for a simple lock, a number: a semaphore's or a latch's count) is left
-- alone with a WRONGTYPE error.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
local other = kind ~= ARGV[3]
if not other and kind == 'hash' then
    -- A read-write lock's hash has a mode field.
    other = redis.call('hexists', KEYS[1], 'mode') == 1
elseif not other then
    -- A simple lock holds its holder's token: whatever the client chose
    -- (locksmith's 32 hex digits, another client's UUID or text), but not
    -- a number, which is a semaphore's or a latch's count.
    other = string.match(redis.call('get', KEYS[1]), '^-?%d+$') ~= nil
end
if other then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is not a lock of this kind')
end
redis.call('del', KEYS[1])
announce(KEYS[2], ARGV[1], ARGV[2])
return 1

-- Delete a lock regardless of its owner and wake its waiters.
-- KEYS[1]  lock key
-- KEYS[2]  release channel
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- ARGV[3]  the key's type for this kind of lock: 'hash' (a lock) or
--          'string' (a simple lock)
-- Returns 1 if a lock was deleted, 0 if there was none. A key that is no
-- lock of this kind is left alone with a WRONGTYPE error: another type, a
-- read-write lock's hash (its mode field), or a key without an expiry
-- (every lock has a lease; a semaphore's or a latch's count, a fenced
-- store, an application's own data usually have none).
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
local other = kind ~= ARGV[3] or redis.call('pttl', KEYS[1]) < 0
if not other and kind == 'hash' then
    other = redis.call('hexists', KEYS[1], 'mode') == 1
end
if other then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is not a lock of this kind')
end
redis.call('del', KEYS[1])
announce(KEYS[2], ARGV[1], ARGV[2])
return 1

-- Delete a read-write lock whatever its mode and whoever holds it, and
-- wake every waiter, reader and writer (Redisson's read and write
-- forceUnlock each do this for one mode).
-- KEYS[1]  lock key
-- KEYS[2]  release channel
-- ARGV[1]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- Returns 1 if a lock was deleted, 0 if there was none. Any other key
-- under the name (a lock, a semaphore, a hash without an expiry: every
-- lock has a lease) is left alone with a WRONGTYPE error.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'hash' or redis.call('hexists', KEYS[1], 'mode') == 0
    or redis.call('pttl', KEYS[1]) < 0 then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is not a read-write lock')
end
redis.call('del', KEYS[1])
-- Redisson's READ_UNLOCK_MESSAGE: everyone waiting tries again.
announce(KEYS[2], '1', ARGV[1])
return 1

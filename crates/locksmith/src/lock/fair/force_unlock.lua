-- Delete a fair lock whoever holds it and wake the waiter at the head of
-- its queue, after passing the waiters that gave up (Redisson's
-- RFairLock.forceUnlock).
-- KEYS[1]  lock hash
-- KEYS[2]  queue list
-- KEYS[3]  timeout zset
-- KEYS[4]  locksmith's own waiters' give-up times (see common.lua)
-- ARGV[1]  release channel prefix redisson_lock__channel:{NAME}
-- ARGV[2]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- Returns 1 if a lock was deleted, 0 if there was none. A key that is no
-- lock (another type, a read-write lock's hash, a hash without an expiry)
-- is left alone with a WRONGTYPE error.
local key, queue, timeouts, ours = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local kind = redis.call('type', key)['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'hash' or redis.call('hexists', key, 'mode') == 1 or redis.call('pttl', key) < 0 then
    return redis.error_reply('WRONGTYPE ' .. key .. ' is not a lock')
end
local head = purge(queue, timeouts, ours, now_ms())
redis.call('del', key)
if head ~= false then
    announce(ARGV[1] .. ':' .. head, '0', ARGV[2])
end
return 1

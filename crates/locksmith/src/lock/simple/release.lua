-- Compare-and-delete release of a SET NX PX lock.
-- KEYS[1]  lock key
-- KEYS[2]  release channel (wakes locksmith waiters; other clients poll)
-- ARGV[1]  the holder's token
-- ARGV[2]  the unlock message (0)
-- ARGV[3]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- Returns 1 released, 0 not held by this token.
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
    announce(KEYS[2], ARGV[2], ARGV[3])
    return 1
end
return 0

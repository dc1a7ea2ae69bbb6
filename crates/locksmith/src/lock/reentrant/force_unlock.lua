-- Delete a lock regardless of its owner and wake its waiters.
-- KEYS[1]  lock key
-- KEYS[2]  release channel
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- Returns 1 if a lock was deleted, 0 if there was none.
if redis.call('del', KEYS[1]) == 1 then
    announce(KEYS[2], ARGV[1], ARGV[2])
    return 1
end
return 0

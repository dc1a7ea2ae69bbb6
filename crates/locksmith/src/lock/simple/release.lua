-- Compare-and-delete release of a SET NX PX lock.
-- KEYS[1]  lock key
-- KEYS[2]  release channel (wakes locksmith waiters; other clients poll)
-- ARGV[1]  the holder's token
-- ARGV[2]  the unlock message (0)
-- ARGV[3]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- ARGV[4]  how long (ms) the release's receipt stays; '0' leaves none
-- Returns 1 released; 2 already released by an earlier send of this very
-- release (its receipt is there; tokens are never reused, so the receipt
-- is this hold's); 0 not held by this token.
local receipt_ttl = ARGV[4] or '0'
if redis.call('get', KEYS[1]) == ARGV[1] then
    leave_receipt(KEYS[1], ARGV[1], '1', receipt_ttl)
    redis.call('del', KEYS[1])
    announce(KEYS[2], ARGV[2], ARGV[3])
    return 1
end
if receipt_ttl ~= '0' and redis.call('get', receipt_key(KEYS[1], ARGV[1])) == '1' then
    return 2
end
return 0

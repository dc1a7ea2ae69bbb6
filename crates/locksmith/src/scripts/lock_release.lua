-- Release one hold of a reentrant lock, idempotently.
-- KEYS[1]  lock hash
-- KEYS[2]  release channel, redisson_lock__channel:{NAME}
-- ARGV[1]  lease in milliseconds, re-armed while holds remain
-- ARGV[2]  owner field
-- ARGV[3]  the hold count this owner believes it has before this release
-- ARGV[4]  the unlock message (0)
-- Returns {1, 0} freed (deleted and published), {2, count} still held with
-- count holds (also for a resend that already landed), {0, count-on-server}
-- not held by this owner.
local expected = tonumber(ARGV[3])
local held = redis.call('hget', KEYS[1], ARGV[2])
if held == false then
    return {0, 0}
end
held = tonumber(held)
if held == expected then
    if held > 1 then
        redis.call('hincrby', KEYS[1], ARGV[2], -1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {2, held - 1}
    end
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[4])
    return {1, 0}
end
if held == expected - 1 then
    return {2, held}
end
return {0, held}

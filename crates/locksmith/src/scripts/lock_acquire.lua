-- Acquire a reentrant lock, idempotently (Redisson-compatible layout).
-- KEYS[1]  lock hash: field <owner> = hold count, PEXPIRE = lease
-- KEYS[2]  fencing counter (string), INCR on every grant from free
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, "<client-uuid>:<holder-id>"
-- ARGV[3]  the hold count this owner believes it has before this acquire
-- Returns {1, token, count} granted (also for a resend of a grant that already
-- landed), {0, pttl, 0} busy, {-1, count-on-server, 0} when the server
-- disagrees with the owner's count (the hold was lost).
local expected = tonumber(ARGV[3])
-- Fast path: a free lock costs four calls.
if expected == 0 and redis.call('exists', KEYS[1]) == 0 then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, redis.call('incr', KEYS[2]), 1}
end
local held = redis.call('hget', KEYS[1], ARGV[2])
if held == false then
    if expected ~= 0 then
        return {-1, 0, 0}
    end
    return {0, redis.call('pttl', KEYS[1]), 0}
end
held = tonumber(held)
if held == expected then
    held = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, tonumber(redis.call('get', KEYS[2]) or '0'), held}
end
if held == expected + 1 then
    -- A resend of an attempt whose reply was lost: it already landed.
    return {1, tonumber(redis.call('get', KEYS[2]) or '0'), held}
end
return {-1, held, 0}

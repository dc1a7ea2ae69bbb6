-- Acquire a non-reentrant SET NX PX lock (the pattern of Redis's docs and
-- redis-py's Lock), with a fencing token.
-- KEYS[1]  lock key (string holding the holder's random token)
-- KEYS[2]  fencing counter
-- ARGV[1]  random token of this attempt
-- ARGV[2]  lease in milliseconds
-- Returns {1, token} granted (also for a resend that landed), {0, pttl} busy.
local current = redis.call('get', KEYS[1])
if current == ARGV[1] then
    return {1, tonumber(redis.call('get', KEYS[2]) or '0')}
end
if current then
    return {0, redis.call('pttl', KEYS[1])}
end
-- The counter first: if it is not a counter, nothing is written.
local token = next_token(KEYS[2])
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, token}

-- Write to a fenced store: accepted only if the writer's fencing token is
-- at least the highest this store has accepted.
-- KEYS[1]  store hash: field 'token' = highest accepted token, 'value'
-- ARGV[1]  the writer's fencing token (at most 2^53: compared as a number)
-- ARGV[2]  the value
-- Returns {1, token} written, or {0, highest} refused (a stale token);
-- nothing changes on a refusal.
local highest = redis.call('hget', KEYS[1], 'token')
if highest ~= false then
    if tonumber(highest) == nil then
        return redis.error_reply('WRONGTYPE fenced store token is not a number')
    end
    if tonumber(ARGV[1]) < tonumber(highest) then
        return {0, tonumber(highest)}
    end
end
redis.call('hset', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {1, tonumber(ARGV[1])}

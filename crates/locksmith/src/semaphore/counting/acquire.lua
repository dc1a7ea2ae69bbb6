-- Take permits from semaphores (Redisson-compatible layout: a string key
-- holding the number of available permits).
-- Takes a batch of independent requests (one or many), so concurrent
-- acquires of one client share a script call.
-- Per request i:
--   KEYS[i]  semaphore key
--   ARGV[i]  permits wanted (a positive integer)
-- Returns one reply per request: {1, left} taken, left permits remain;
-- {0, available} not enough permits ({0, -1} when the semaphore was never
-- set), nothing changed; or {-2, error message} for a request that failed
-- alone (a key of another type, or a value that is not a number).
-- Not idempotent: a resend takes again. The client never resends it.
local function acquire(key, wanted)
    local value = redis.call('get', key)
    if value == false then
        return {0, -1}
    end
    local available = tonumber(value)
    if available == nil then
        error({err = 'WRONGTYPE semaphore value is not a number'})
    end
    wanted = tonumber(wanted)
    if available >= wanted then
        return {1, redis.call('decrby', key, wanted)}
    end
    return {0, available}
end

return each_request(1, 1, function(k, a)
    return acquire(KEYS[k + 1], ARGV[a + 1])
end)

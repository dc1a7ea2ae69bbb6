-- Acquire reentrant locks, idempotently (Redisson-compatible layout).
-- Takes a batch of independent requests (one or many), so concurrent
-- acquires of one client share a script call.
-- Per request i, in order:
--   KEYS  lock hash (field <owner> = hold count, PEXPIRE = lease),
--         fencing counter (string, INCR on every grant from free)
--   ARGV  lease in milliseconds, owner field "<client-uuid>:<holder-id>",
--         the hold count the owner believes it has before this acquire
-- Returns one reply per request: {1, token, count} granted by this call
-- (the lease was set now), {2, token, count, pttl} granted earlier (a
-- resend of a request whose reply was lost, or a grant left over from an
-- attempt the owner gave up on): the lease was set then, not now, and pttl
-- is what is left of it, {0, pttl, 0} busy,
-- {-1, count-on-server, 0} when the server disagrees with the owner's count
-- (the hold was lost), or {-2, error message} for a request that failed alone (e.g.
-- WRONGTYPE) without affecting the others.
-- Counts arrive and are stored as decimal strings; the fast path compares
-- them as strings and converts nothing (number formatting is a visible
-- share of a script's cost).
-- The fencing counter is read or incremented before anything is written,
-- so a counter key of the wrong type fails the request with nothing
-- changed.
-- Request i's KEYS start after k and its ARGV after a (batch.lua); read
-- here rather than by a wrapper, which would cost a call per request.
local function acquire(k, a)
    local key, token_key = KEYS[k + 1], KEYS[k + 2]
    local lease, owner, expected = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
    -- Fast path: a free lock costs four calls.
    if expected == '0' and redis.call('exists', key) == 0 then
        local token = next_token(token_key)
        redis.call('hset', key, owner, '1')
        redis.call('pexpire', key, lease)
        return {1, token, 1}
    end
    expected = tonumber(expected)
    local held = redis.call('hget', key, owner)
    if held == false then
        if expected ~= 0 then
            return {-1, 0, 0}
        end
        return {0, redis.call('pttl', key), 0}
    end
    return reenter(key, token_key, owner, tonumber(held), expected, lease)
end

return each_request(2, 3, acquire)

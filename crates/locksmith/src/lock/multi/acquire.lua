-- Acquire several reentrant locks all or nothing, atomically (a MultiLock
-- whose members all live on one node: one server, or one cluster slot).
-- Same layout as lock_acquire.lua.
-- KEYS  per member i: lock hash (2i-1), fencing counter (2i)
-- ARGV  per member i: owner field (3i-2), the hold count the owner
--       believes it has before this acquire (3i-1), and the member's own
--       lease in milliseconds (3i)
-- Returns {1, token1, count1, token2, count2, ...} granted now (each
-- member's lease set now); {2, token1, count1, ...} every member already
-- shows this acquire (a resend whose first send landed): nothing changed;
-- {0, pttl} some member is held by another owner (pttl: the longest
-- remaining lease among those), nothing changed; {-1, i} member i's owner
-- count disagrees with the server (a hold was lost), nothing changed;
-- {-2, key} a key holds another type, {-3, key} a fencing counter is
-- not an integer: nothing changed.
-- Everything is checked before anything is written.
local n = #KEYS / 2
local busy, longest = false, 0
local resent = 0
for i = 1, n do
    local key, token_key = KEYS[2 * i - 1], KEYS[2 * i]
    local kind = redis.call('type', key)['ok']
    if kind ~= 'none' and kind ~= 'hash' then
        return {-2, key}
    end
    kind = redis.call('type', token_key)['ok']
    if kind ~= 'none' and kind ~= 'string' then
        return {-2, token_key}
    end
    local counter = redis.call('get', token_key)
    if counter and not tonumber(counter) then
        -- INCR would fail after other members were written.
        return {-3, token_key}
    end
    local expected = tonumber(ARGV[3 * i - 1])
    local held = tonumber(redis.call('hget', key, ARGV[3 * i - 2]) or '0')
    if held == expected + 1 then
        resent = resent + 1
    elseif held ~= expected then
        return {-1, i}
    elseif held == 0 and redis.call('exists', key) == 1 then
        busy = true
        longest = math.max(longest, redis.call('pttl', key))
    end
end
if resent > 0 and resent < n then
    -- One send grants all members or none: this owner's counts are off.
    return {-1, 0}
end
if busy then
    return {0, longest}
end
local out = {resent == n and 2 or 1}
for i = 1, n do
    local key, token_key, owner = KEYS[2 * i - 1], KEYS[2 * i], ARGV[3 * i - 2]
    local token, count
    if resent == n then
        count = tonumber(redis.call('hget', key, owner))
    else
        if redis.call('exists', key) == 0 then
            next_token(token_key)
        end
        count = redis.call('hincrby', key, owner, 1)
        redis.call('pexpire', key, ARGV[3 * i])
    end
    out[2 * i] = tonumber(redis.call('get', token_key) or '0')
    out[2 * i + 1] = count
end
return out

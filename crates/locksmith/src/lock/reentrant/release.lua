-- Release one hold of reentrant locks, idempotently, optionally handing a
-- freed lock straight to a waiting owner of the same client.
-- Takes a batch of independent requests (one or many).
-- Per request i, in order:
--   KEYS  lock hash, release channel redisson_lock__channel:{NAME},
--         fencing counter
--   ARGV  lease in milliseconds (re-armed while holds remain), owner field,
--         the hold count the owner believes it has before this release,
--         the unlock message (0), successor owner field ('' for none),
--         successor's lease in milliseconds, '1' to hand off only if at
--         most one connection (the caller's client) listens on the release
--         channel, i.e. no other client waits for the lock, how the
--         release is announced: 'p' PUBLISH, 's' SPUBLISH (sharded, on a
--         cluster), 'b' both, the hold's episode (locksmith's own id of
--         it) and how long (ms) a final release's receipt stays ('0':
--         none; receipt.lua)
-- Returns one reply per request: {1, 0} freed (deleted and published; or
-- a resend finding the receipt its first send left),
-- {2, count} one hold released now, count holds left, lease re-armed now;
-- {4, count} nothing changed, the owner has count holds (a resend whose
-- first send landed, or the rollback of an acquire that never landed);
-- {3, token} freed and granted to the successor with a new fencing token
-- (no message: nobody else was woken), {0, count-on-server} not held by
-- this owner, or {-2, error message} for a request that failed alone.
-- A hand-off increments the fencing counter before writing anything, so a
-- counter key of the wrong type fails the request with nothing changed.
-- announce() and listeners() come from announce.lua.
-- Request i's KEYS start after k and its ARGV after a (batch.lua).
local function release(k, a)
    local key, channel, token_key = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
    local lease, owner, expected, message = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
    local successor, successor_lease, if_alone = ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
    local mode, episode, ttl = ARGV[a + 8], ARGV[a + 9], ARGV[a + 10]
    local held = redis.call('hget', key, owner)
    -- Fast path: the last hold of a lock nobody waits for here; counts are
    -- compared as the decimal strings they are, without conversion.
    if held == '1' and expected == '1' and successor == '' then
        leave_receipt(key, owner, episode, ttl)
        redis.call('del', key)
        announce(channel, message, mode)
        return {1, 0}
    end
    expected = tonumber(expected)
    if held == false then
        if successor ~= '' and expected == 1
            and redis.call('hget', key, successor) == '1'
            and redis.call('hlen', key) == 1 then
            -- A resend of a hand-off that already landed (the successor
            -- waits for this answer, so it cannot have acquired by itself).
            return {3, tonumber(redis.call('get', token_key) or '0')}
        end
        return gone_answer(key, owner, expected, episode)
    end
    held = tonumber(held)
    if held == expected then
        if held > 1 then
            redis.call('hincrby', key, owner, -1)
            redis.call('pexpire', key, lease)
            return {2, held - 1}
        end
        if successor ~= '' and redis.call('hlen', key) == 1
            and (if_alone ~= '1'
                 or listeners(channel, mode) <= 1) then
            -- Add the successor before removing the owner: the key is never
            -- deleted and re-created.
            local token = next_token(token_key)
            redis.call('hset', key, successor, '1')
            redis.call('hdel', key, owner)
            redis.call('pexpire', key, successor_lease)
            return {3, token}
        end
        leave_receipt(key, owner, episode, ttl)
        redis.call('del', key)
        announce(channel, message, mode)
        return {1, 0}
    end
    return other_count(held, expected)
end

return each_request(3, 10, release)

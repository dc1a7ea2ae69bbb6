-- reenter(key, token_key, owner, held, expected, lease): an owner that
-- has `held` holds of lock hash `key` asks for one more, believing it has
-- `expected`. Answers as the acquire scripts do: {1, token, count} granted
-- now (lease re-armed), {2, token, count, pttl} granted by an earlier send
-- of this very request (a resend whose reply was lost), {-1, held, 0} when
-- the owner's count and the server's disagree. The fencing counter is read
-- (only for a grant) before anything is written, so a counter of the wrong
-- type changes nothing.
local function reenter(key, token_key, owner, held, expected, lease)
    if held == expected then
        local token = tonumber(redis.call('get', token_key) or '0')
        held = redis.call('hincrby', key, owner, 1)
        redis.call('pexpire', key, lease)
        return {1, token, held}
    end
    if held == expected + 1 then
        return {2, tonumber(redis.call('get', token_key) or '0'), held,
            redis.call('pttl', key)}
    end
    return {-1, held, 0}
end

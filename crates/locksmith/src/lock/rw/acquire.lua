-- Acquire read or write holds of read-write locks, idempotently.
-- Takes a batch of independent requests (one or many).
-- Per request i, in order:
--   KEYS  lock hash, fencing counter, waiting-writers zset
--         {NAME}:locksmith_writers (locksmith's own: writer preference)
--   ARGV  'r' or 'w', owner, this owner's hold count of that kind before
--         this acquire, lease in milliseconds, '1' when this writer claims
--         preference while it waits ('0' otherwise), how long (ms) its
--         claim lasts unless renewed (0: no claim, a single try)
-- A reader that holds nothing yet waits while any unexpired claim exists,
-- whatever its own handle's setting.
-- Returns one reply per request: {1, token, count} granted by this call;
-- {2, token, count, pttl} granted earlier (a resend whose reply was lost);
-- {0, pttl, 0} busy; {-1, count-on-server, 0} the server disagrees with the
-- owner's count; {-3, 0, 0} a write asked by an owner that holds read holds
-- (an upgrade, which would deadlock); {-2, error message} failed alone.
local function token_now(token_key)
    return tonumber(redis.call('get', token_key) or '0')
end

local function busy(key)
    local pttl = redis.call('pttl', key)
    if pttl < 0 then
        pttl = 100
    end
    return {0, pttl, 0}
end

-- The answer when the owner's `held` holds of this side do not allow a
-- grant now: a resend of a request that already landed ({2, ...}), or a
-- count the owner and the server disagree on ({-1, ...}); nil when `held`
-- is what the owner believes and the request may go on.
local function settled(key, token_key, held, expected)
    if held == expected + 1 and held > 0 then
        return {2, token_now(token_key), held, redis.call('pttl', key)}
    end
    if held ~= expected then
        return {-1, held, 0}
    end
    return nil
end

local function acquire(key, token_key, writers, kind, owner, expected, lease, prefer, patience, now)
    expected = tonumber(expected)
    local mode = redis.call('hget', key, 'mode')
    local wfield = owner .. ':write'
    if kind == 'r' then
        local held = tonumber(redis.call('hget', key, owner) or '0')
        local answer = settled(key, token_key, held, expected)
        if answer then
            return answer
        end
        local may = mode == false or mode == 'read'
            or (mode == 'write' and redis.call('hexists', key, wfield) == 1)
        if may and held == 0 and mode ~= 'write' and redis.call('exists', writers) == 1 then
            -- Preferring writers wait: newcomers queue behind them.
            redis.call('zremrangebyscore', writers, 0, now)
            if redis.call('zcard', writers) > 0 then
                may = false
            end
        end
        if not may then
            return busy(key)
        end
        local token
        if mode == false then
            token = next_token(token_key)
            redis.call('hset', key, 'mode', 'read')
        else
            token = token_now(token_key)
        end
        local n = redis.call('hincrby', key, owner, 1)
        redis.call('set', hold_prefix(key, owner) .. ':' .. n, 1, 'px', lease)
        redis.call('pexpire', key, math.max(redis.call('pttl', key), tonumber(lease)))
        return {1, token, n}
    end
    local held = tonumber(redis.call('hget', key, wfield) or '0')
    local answer = settled(key, token_key, held, expected)
    if answer then
        return answer
    end
    if mode == false then
        local token = next_token(token_key)
        redis.call('hset', key, 'mode', 'write', wfield, 1)
        redis.call('pexpire', key, lease)
        redis.call('zrem', writers, owner)
        return {1, token, 1}
    end
    if mode == 'write' and held > 0 then
        local n = redis.call('hincrby', key, wfield, 1)
        redis.call('pexpire', key, math.max(redis.call('pttl', key), tonumber(lease)))
        return {1, token_now(token_key), n}
    end
    if redis.call('hexists', key, owner) == 1 then
        return {-3, 0, 0}
    end
    patience = tonumber(patience)
    if prefer == '1' and patience > 0 then
        redis.call('zadd', writers, now + patience, owner)
        -- Only ever extend: other writers' claims may last longer.
        if redis.call('pttl', writers) < patience then
            redis.call('pexpire', writers, patience)
        end
    end
    return busy(key)
end

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return each_request(3, 6, function(k, a)
    return acquire(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], ARGV[a + 1], ARGV[a + 2],
        ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], now)
end)

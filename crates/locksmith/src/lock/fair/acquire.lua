-- Acquire fair locks, idempotently, in strict arrival order across clients.
-- Takes a batch of independent requests (one or many).
-- Per request i, in order:
--   KEYS  lock hash, queue list, timeout zset, fencing counter, the zset
--         {NAME}:locksmith_give_up of locksmith's own waiters' give-up times
--   ARGV  lease in milliseconds, owner field, the hold count the owner
--         believes it has before this acquire, how long (ms) the owner may
--         stay queued without asking again before it counts as gone (0: a
--         single try that does not join the queue), the queue step (ms):
--         Redisson's fairLockWaitTimeout
-- Give-up times follow Redisson's accounting, so Java waiters and ours
-- share one queue (see common.lua).
-- Returns one reply per request: {1, token, count} granted by this call;
-- {2, token, count, pttl} granted earlier (a resend whose reply was lost);
-- {0, wait, position} queued (joined or still there, give-up time
-- refreshed), at this 0-based position; wait is when to look again without
-- a message, in ms: the holder's remaining lease, or while the lock is free
-- but an earlier waiter has not taken it, until that waiter counts as gone
-- (for a Redisson waiter, minutes: the caller's own re-check bounds it);
-- {-1, count-on-server, 0} when the server disagrees with the owner's count;
-- {-2, error message} for a request that failed alone.
local function acquire(key, queue, timeouts, token_key, ours, lease, owner, expected, patience, step, now)
    local head = purge(queue, timeouts, ours, now)
    expected = tonumber(expected)
    local held = redis.call('hget', key, owner)
    if held ~= false then
        return reenter(key, token_key, owner, tonumber(held), expected, lease)
    end
    if expected ~= 0 then
        return {-1, 0, 0}
    end
    if redis.call('exists', key) == 0 and (head == false or head == owner) then
        local token = next_token(token_key)
        if head == owner then
            redis.call('lpop', queue)
            redis.call('zrem', timeouts, owner)
            redis.call('zrem', ours, owner)
            -- As Redisson's grant does: everyone left moves one place up.
            if mixed(queue, timeouts, ours, now) then
                step_back(timeouts, ours, redis.call('lrange', queue, 0, -1), step, now)
            end
            ends_due(queue, timeouts, ours, step, now)
        end
        redis.call('hset', key, owner, 1)
        redis.call('pexpire', key, lease)
        return {1, token, 1}
    end
    if patience == '0' then
        -- A single try: do not join the queue.
        return {0, math.max(0, redis.call('pttl', key)), -1}
    end
    -- Busy: join the queue, or stay in it with a fresh give-up time: the
    -- patience from now, and in the timeout zset one step more per waiter
    -- ahead (see common.lua).
    local position = redis.call('lpos', queue, owner)
    local joined = position == false
    if joined then
        position = redis.call('rpush', queue, owner) - 1
    end
    patience = tonumber(patience)
    local padded = patience + position * tonumber(step)
    redis.call('zadd', timeouts, now + padded, owner)
    redis.call('zadd', ours, now + patience, owner)
    -- `ours` outlives every time its waiters have in the timeout zset
    -- (none moves later without a refresh, or tail_due, which extends it
    -- too): while an entry matters, it is there.
    if redis.call('pttl', ours) < padded then
        redis.call('pexpire', ours, padded)
    end
    if not joined then
        -- A waiter refreshing its place behind others also keeps the
        -- tail's time from going stale while no grant comes (a tail that
        -- died keeps its time counted from now, see tail_due).
        local len = redis.call('llen', queue)
        if position < len - 1 then
            tail_due(queue, timeouts, ours, step, now, len)
        end
    end
    local pttl = redis.call('pttl', key)
    if pttl == -2 then
        -- Free, but an earlier waiter's turn: look again when it counts as
        -- gone if it does not take the lock.
        local head_give_up = redis.call('zscore', ours, head) or redis.call('zscore', timeouts, head)
        pttl = head_give_up and math.max(0, tonumber(head_give_up) - now) or 0
    elseif pttl == -1 then
        pttl = 100
    end
    return {0, pttl, position}
end

local now = now_ms()
return each_request(5, 5, function(k, a)
    return acquire(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5],
        ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], now)
end)

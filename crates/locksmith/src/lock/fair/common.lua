-- Shared prelude of the fair lock scripts (Redisson's RFairLock layout):
-- lock hash NAME as for the reentrant lock, list redisson_lock_queue:{NAME}
-- of waiting owners in arrival order, zset redisson_lock_timeout:{NAME}
-- owner -> give-up time (epoch ms), and one release channel per waiter,
-- redisson_lock__channel:{NAME}:<owner>. Times come from the server's
-- clock (TIME), never a client's.

-- The server's time in milliseconds.
local function now_ms()
    local t = redis.call('time')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Give-up times, shared with Redisson. Redisson's waiters never refresh
-- theirs: a joiner gets the last waiter's time plus Redisson's wait
-- (fairLockWaitTimeout), and each Redisson grant takes that wait off every
-- waiter. locksmith's waiters (listed in the set `ours`,
-- {NAME}:locksmith_waiters, which Redisson does not read) refresh theirs,
-- and set them to the patience from now plus one queue step per waiter
-- ahead, so Redisson's grants ahead of them never make them look gone; each
-- waiter that leaves the line ahead of them (a grant, a give-up, a purge)
-- takes that step off again, so a locksmith waiter that died is passed
-- once its patience ran out at the head.

-- Takes one step off each waiter in `waiters`, as one ahead of them left the
-- line by a grant or a give-up: locksmith's lose the step their time carried
-- for it; Redisson's lose it too, as Redisson's own grants take it off, but
-- never down below `now + step` (their time was counted from the waiter
-- ahead, whose own may have been only a locksmith waiter's short patience).
local function step_back(timeouts, ours, waiters, step, now)
    step = tonumber(step)
    for _, waiter in ipairs(waiters) do
        local score = redis.call('zscore', timeouts, waiter)
        if score ~= false then
            score = tonumber(score)
            if redis.call('sismember', ours, waiter) == 1 then
                redis.call('zadd', timeouts, score - step, waiter)
            else
                redis.call('zadd', timeouts, math.max(score - step, math.min(score, now + step)), waiter)
            end
        end
    end
end

-- Drops waiters at the head of the queue whose give-up time has passed
-- (they died or gave up without leaving), as Redisson does; each one
-- dropped takes one step off locksmith's waiters behind it (Redisson's are
-- left as Redisson leaves them). Members of `ours` no longer queued (taken
-- out by a Redisson client) are forgotten.
local function purge(queue, timeouts, ours, step, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if head == false then
            redis.call('del', ours)
            return
        end
        local give_up = redis.call('zscore', timeouts, head)
        if give_up ~= false and tonumber(give_up) <= now then
            redis.call('zrem', timeouts, head)
            redis.call('lpop', queue)
            redis.call('srem', ours, head)
            for _, waiter in ipairs(redis.call('smembers', ours)) do
                if redis.call('zscore', timeouts, waiter) ~= false then
                    redis.call('zincrby', timeouts, -tonumber(step), waiter)
                else
                    redis.call('srem', ours, waiter)
                end
            end
        else
            return
        end
    end
end

-- Tells the waiter at the head of the queue that the lock is free (on its
-- own channel, so nobody else wakes).
local function wake_head(queue, prefix, message, mode)
    local head = redis.call('lindex', queue, 0)
    if head ~= false then
        announce(prefix .. ':' .. head, message, mode)
    end
end


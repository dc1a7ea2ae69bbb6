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

-- Drops waiters at the head of the queue whose give-up time has passed
-- (they died or gave up without leaving), as Redisson does.
local function purge(queue, timeouts, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if head == false then
            return
        end
        local give_up = redis.call('zscore', timeouts, head)
        if give_up ~= false and tonumber(give_up) <= now then
            redis.call('zrem', timeouts, head)
            redis.call('lpop', queue)
        else
            return
        end
    end
end

-- Moves the give-up time of each waiter in `waiters` back by `step` ms
-- (Redisson's accounting: a waiter's time carries one step per waiter
-- ahead, taken off as each one leaves the line by a grant or by giving up).
local function step_back(timeouts, waiters, step)
    local by = -tonumber(step)
    for _, waiter in ipairs(waiters) do
        redis.call('zincrby', timeouts, by, waiter)
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


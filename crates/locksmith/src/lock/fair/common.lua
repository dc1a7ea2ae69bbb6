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
-- (fairLockWaitTimeout, the `step` here), each Redisson grant takes a
-- step off every waiter, and each Redisson waiter that gives up takes one
-- off those behind it. Redisson's scripts read only two of these times:
-- the head's (their purge passes a head whose time has passed) and the
-- tail's (a joiner's time is the tail's plus a step).
--
-- A locksmith waiter's time in the timeout zset is the patience from its
-- last refresh plus one step per waiter ahead of it then: Redisson grants
-- can only come from waiters ahead, so they never make it look gone.
-- Nothing walks the queue to take steps off as waiters leave (a grant
-- costs the same behind 64 waiters as behind one); instead:
-- - the waiter that reaches the head gets the time that counts there
--   (head_due): a locksmith waiter its own, a Redisson waiter at most a
--   step from now;
-- - a locksmith waiter refreshing behind the tail, and a give-up, bring a
--   locksmith tail's time up to date (tail_due), so a Redisson joiner never
--   inherits a time already past from a tail that died.
-- Its own give-up time, the patience from its last refresh, is kept in
-- the zset `ours` ({NAME}:locksmith_give_up, which Redisson does not read;
-- it expires once every time its waiters have in the timeout zset has
-- passed, so it is there while it matters), and that is what locksmith's
-- purge reads: a locksmith waiter that died is passed once its patience
-- ran out, whatever its place was.

-- The time Redisson's purge should read for the waiter at the head (none
-- is ahead of it for a step to count): a locksmith waiter's own, so a
-- Redisson client passes it after its patience if it died; a Redisson
-- waiter's at most a step from now, which is what Redisson's own grants
-- leave a head (its time counted every waiter that was ahead of it when it
-- joined, and no walk took those steps off), so one that died delays the
-- queue by at most a step. Returns the head (false: the queue is empty).
local function head_due(queue, timeouts, ours, step, now)
    local head = redis.call('lindex', queue, 0)
    if head ~= false then
        local own = redis.call('zscore', ours, head)
        if own ~= false then
            redis.call('zadd', timeouts, own, head)
        else
            local time = redis.call('zscore', timeouts, head)
            local cap = now + tonumber(step)
            if time ~= false and tonumber(time) > cap then
                redis.call('zadd', timeouts, cap, head)
            end
        end
    end
    return head
end

-- A locksmith tail's time brought up to date: its own (counted from now
-- at the earliest: a tail that died, whose own time passed, must not hand
-- a Redisson joiner a time already past, which would have that live
-- joiner passed as dead at the head) plus one step per waiter ahead;
-- `ours` then lives as long as that time, as it must while the tail's own
-- entry matters (until the tail is purged at the head). Nothing to do when
-- the tail is `except` (a waiter that has just set its own time).
local function tail_due(queue, timeouts, ours, step, now, except)
    local len = redis.call('llen', queue)
    if len < 2 then
        return
    end
    local tail = redis.call('lindex', queue, -1)
    if tail == except then
        return
    end
    local own = redis.call('zscore', ours, tail)
    if own ~= false then
        local ahead = (len - 1) * tonumber(step)
        own = tonumber(own)
        if own < now then
            own = now
            if redis.call('pttl', ours) < ahead then
                redis.call('pexpire', ours, ahead)
            end
        end
        redis.call('zadd', timeouts, own + ahead, tail)
    end
end

-- Drops waiters at the head of the queue whose give-up time has passed
-- (they died or gave up without leaving), as Redisson does: a locksmith
-- waiter's own time from `ours`, a Redisson waiter's from the timeout
-- zset. The head left gets its time as head_due says (only written when it
-- changes). Returns the head left (false: the queue is empty).
local function purge(queue, timeouts, ours, step, now)
    local dropped = false
    while true do
        local head = redis.call('lindex', queue, 0)
        if head == false then
            return false
        end
        local own = redis.call('zscore', ours, head)
        local give_up = own or redis.call('zscore', timeouts, head)
        if give_up ~= false and tonumber(give_up) <= now then
            redis.call('zrem', timeouts, head)
            redis.call('zrem', ours, head)
            redis.call('lpop', queue)
            dropped = true
        else
            if own ~= false then
                if dropped then
                    redis.call('zadd', timeouts, own, head)
                end
            elseif give_up ~= false and tonumber(give_up) > now + tonumber(step) then
                redis.call('zadd', timeouts, now + tonumber(step), head)
            end
            return head
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

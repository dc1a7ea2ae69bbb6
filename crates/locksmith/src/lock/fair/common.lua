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
-- (fairLockWaitTimeout), and each Redisson grant, and each Redisson waiter
-- that gives up, takes that wait off every waiter behind. So in the
-- timeout zset a locksmith waiter's time is the patience from now plus one
-- queue step per waiter ahead (refreshed while it lives): Redisson's
-- grants ahead never make it look gone, and a Redisson waiter joining
-- behind it gets a time that counts every waiter ahead.
-- Its own give-up time, the patience from its last refresh, is kept in
-- the zset `ours` ({NAME}:locksmith_give_up, which Redisson does not read;
-- it expires once every time its waiters have in the timeout zset has
-- passed, so it is there while it matters), and that is what
-- locksmith's purge reads: a locksmith waiter that died is passed once its
-- patience ran out, whatever its place was.
-- While every queued waiter is locksmith's, nothing reads the steps, so a
-- grant or a give-up walks nothing; with Redisson waiters in line, each
-- one leaving takes a step off the waiters behind it, as Redisson does.

-- True when some queued waiter is Redisson's (has a give-up time in the
-- timeout zset and none of locksmith's own). Entries of `ours` whose time
-- passed and that are no longer queued go first (a Redisson client's purge
-- took the waiter out, and it does not read `ours`; left, they would hide
-- as many Redisson waiters from the count); one still queued stays, to be
-- passed by its own time when it reaches the head.
local function mixed(queue, timeouts, ours, now)
    local all, mine = redis.call('zcard', timeouts), redis.call('zcard', ours)
    if mine > 0 then
        for _, owner in ipairs(redis.call('zrangebyscore', ours, '-inf', now)) do
            -- Both sides take a waiter out of the queue and the timeout
            -- zset together.
            if redis.call('zscore', timeouts, owner) == false then
                redis.call('zrem', ours, owner)
                mine = mine - 1
            end
        end
    end
    return all > mine
end

-- Takes one step off the give-up time of each waiter in `waiters`, as one
-- ahead of them left the line (a grant or a give-up), in one ZADD:
-- locksmith's lose the step their time carried for it; Redisson's lose it
-- too, as Redisson's own grants take it off, but never down below
-- `now + step` (their time was counted from the waiter ahead, whose own
-- may have been only a locksmith waiter's short patience).
local function step_back(timeouts, ours, waiters, step, now)
    if #waiters == 0 then
        return
    end
    step = tonumber(step)
    local scores = {}
    local flat = redis.call('zrange', timeouts, 0, -1, 'withscores')
    for i = 1, #flat, 2 do
        scores[flat[i]] = tonumber(flat[i + 1])
    end
    local mine = {}
    for _, owner in ipairs(redis.call('zrange', ours, 0, -1)) do
        mine[owner] = true
    end
    local args = {}
    for _, waiter in ipairs(waiters) do
        local score = scores[waiter]
        if score ~= nil then
            if mine[waiter] then
                score = score - step
            else
                score = math.max(score - step, math.min(score, now + step))
            end
            args[#args + 1] = score
            args[#args + 1] = waiter
            if #args >= 1000 then
                redis.call('zadd', timeouts, unpack(args))
                args = {}
            end
        end
    end
    if #args > 0 then
        redis.call('zadd', timeouts, unpack(args))
    end
end

-- Redisson's scripts read only two waiters' times: the head's (their
-- purge) and the tail's (a joiner's time is the tail's plus a step). A
-- locksmith waiter elsewhere may carry steps for waiters that left ahead
-- of it while no walk ran, until it refreshes; so after a waiter leaves
-- the line, the locksmith waiter now at `at` (0: the head, -1: the tail)
-- gets its time exactly: its own plus one step per waiter ahead of it
-- (`ahead`). The head then is passed by a Redisson client after its
-- patience if it died, and a Redisson joiner behind the tail counts every
-- waiter ahead.
local function due(queue, timeouts, ours, at, ahead)
    local waiter = redis.call('lindex', queue, at)
    local own = redis.call('zscore', ours, waiter)
    if own ~= false then
        redis.call('zadd', timeouts, tonumber(own) + ahead, waiter)
    end
end

-- The tail gets its time exactly (see due), counted from now at the
-- earliest: a tail that died, whose own time passed, must not hand a
-- Redisson joiner a time already past (it would be passed as dead at the
-- head, alive); `ours` then lives as long as that time, as it must while
-- the tail's own entry matters (until the tail is purged at the head).
local function tail_due(queue, timeouts, ours, step, now, len)
    local tail = redis.call('lindex', queue, -1)
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

-- The head and the tail get their times exactly (see due and tail_due).
local function ends_due(queue, timeouts, ours, step, now)
    local len = redis.call('llen', queue)
    if len > 0 then
        due(queue, timeouts, ours, 0, 0)
    end
    if len > 1 then
        tail_due(queue, timeouts, ours, step, now, len)
    end
end

-- Drops waiters at the head of the queue whose give-up time has passed
-- (they died or gave up without leaving), as Redisson does: a locksmith
-- waiter's own time from `ours`, a Redisson waiter's from the timeout
-- zset. A locksmith waiter left at the head gets its own time in the
-- timeout zset too (see due). Returns the head left (false: the queue is
-- empty).
local function purge(queue, timeouts, ours, now)
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
            if dropped and own ~= false then
                redis.call('zadd', timeouts, own, head)
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

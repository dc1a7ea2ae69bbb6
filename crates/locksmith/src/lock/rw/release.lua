-- Release one read or write hold of a read-write lock, idempotently.
-- KEYS[1]  lock hash
-- KEYS[2]  waiting-writers zset (a writer that gives up leaves it)
-- ARGV[1]  'r' or 'w' (or 'leave': a waiting writer gives up; answers {1, 0})
-- ARGV[2]  owner
-- ARGV[3]  this owner's hold count of that kind before this release
-- ARGV[4]  lease in milliseconds (re-armed while write holds remain)
-- The hash's expiry always covers every hold left in it: the write hold's
-- lease (the hash's own expiry) and each read hold's timeout key.
-- ARGV[5]  channel redisson_rwlock:{NAME}
-- ARGV[6]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- ARGV[7]  the hold's episode (locksmith's own id of it), ARGV[8] how long (ms) the receipt of
--          an owner's last hold of that kind stays ('0': none; receipt.lua)
-- Returns {1, 0} this owner's last hold of that kind released (or a resend
-- finding the receipt its first send left); {2, count}
-- one released, count left; {4, count} nothing changed, the owner has count
-- holds (a resend whose first send landed); {0, count} not held.
-- A write unlock announces '1' (Redisson's READ_UNLOCK_MESSAGE: everyone
-- may look), also when read holds of the writer remain (a downgrade lets
-- waiting readers in); the last read unlock announces '0'.
local key, writers = KEYS[1], KEYS[2]
local kind, owner, expected, lease = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local channel, mode = ARGV[5], ARGV[6]
local episode, ttl = ARGV[7], ARGV[8]
if kind == 'leave' then
    -- A waiting writer gives up its claim: readers held back by it may go
    -- now, so tell them.
    if redis.call('zrem', writers, owner) == 1 and redis.call('hget', key, 'mode') ~= 'write' then
        announce(channel, '1', mode)
    end
    return {1, 0}
end
local field = owner
if kind == 'w' then
    field = owner .. ':write'
end
local held = redis.call('hget', key, field)
if held == false then
    return gone_answer(key, field, expected, episode)
end
held = tonumber(held)
if held ~= expected then
    return other_count(held, expected)
end
if kind == 'w' then
    if held > 1 then
        redis.call('hincrby', key, field, -1)
        -- Re-armed for the write holds left, never below a read hold of
        -- the writer's (a downgrade) that lasts longer.
        redis.call('pexpire', key, math.max(tonumber(lease), longest_read_hold(key)))
        return {2, held - 1}
    end
    leave_receipt(key, field, episode, ttl)
    redis.call('hdel', key, field)
    if redis.call('hlen', key) == 1 then
        redis.call('del', key)
    else
        redis.call('hset', key, 'mode', 'read')
        local longest = longest_read_hold(key)
        if longest > 0 then
            redis.call('pexpire', key, longest)
        end
    end
    announce(channel, '1', mode)
    return {1, 0}
end
if held == 1 then
    leave_receipt(key, field, episode, ttl)
end
local left = redis.call('hincrby', key, field, -1)
if left == 0 then
    redis.call('hdel', key, field)
end
-- Holds are not tied to keys: the highest-numbered key goes, and the one
-- below it keeps the later of the two expiries, so no remaining hold of
-- this owner ends sooner than its guard was told.
local prefix = hold_prefix(key, owner)
local gone = redis.call('pttl', prefix .. ':' .. held)
redis.call('del', prefix .. ':' .. held)
if held > 1 and gone > redis.call('pttl', prefix .. ':' .. (held - 1)) then
    redis.call('pexpire', prefix .. ':' .. (held - 1), gone)
end
if redis.call('hlen', key) > 1 then
    local longest = longest_read_hold(key)
    if redis.call('hget', key, 'mode') == 'write' then
        -- The write hold has no key of its own: the hash's expiry is its
        -- lease, and a read release must not cut it.
        longest = math.max(longest, redis.call('pttl', key))
    end
    if longest > 0 then
        redis.call('pexpire', key, longest)
        if left == 0 then
            return {1, 0}
        end
        return {2, left}
    end
    if redis.call('hget', key, 'mode') == 'write' then
        if left == 0 then
            return {1, 0}
        end
        return {2, left}
    end
    -- Only read holds whose leases ran out (their owners died): the lock
    -- is free, as Redisson's read unlock decides too.
end
redis.call('del', key)
announce(channel, '0', mode)
return {1, 0}

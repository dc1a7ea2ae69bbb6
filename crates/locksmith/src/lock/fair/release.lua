-- Release one hold of a fair lock, idempotently; a final release wakes
-- only the waiter at the head of the queue (Redisson's fair unlock).
-- KEYS[1]  lock hash
-- KEYS[2]  queue list
-- KEYS[3]  timeout zset
-- KEYS[4]  locksmith's own waiters' give-up times (see common.lua)
-- ARGV[1]  lease in milliseconds (re-armed while holds remain)
-- ARGV[2]  owner field
-- ARGV[3]  the hold count the owner believes it has before this release
-- ARGV[4]  release channel prefix redisson_lock__channel:{NAME}
-- ARGV[5]  how to announce: 'p' PUBLISH, 's' SPUBLISH, 'b' both
-- ARGV[6]  the hold's episode (locksmith's own id of it), ARGV[7] how long (ms) a final
--          release's receipt stays ('0': none; receipt.lua)
-- Returns {1, 0} freed (the head waiter told; or a resend finding the
-- receipt its first send left), {2, count} one hold
-- released, count left, lease re-armed; {4, count} nothing changed, the
-- owner has count holds (a resend whose first send landed); {0, count} not
-- held by this owner (count on the server, 0 when none).
local key, queue, timeouts, ours = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, expected, prefix, mode = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local head = purge(queue, timeouts, ours, now_ms())
local held = redis.call('hget', key, owner)
if held == false then
    return gone_answer(key, owner, expected, ARGV[6])
end
held = tonumber(held)
if held == expected then
    if held > 1 then
        held = redis.call('hincrby', key, owner, -1)
        redis.call('pexpire', key, ARGV[1])
        return {2, held}
    end
    leave_receipt(key, owner, ARGV[6], ARGV[7])
    redis.call('del', key)
    if head ~= false then
        -- The head the purge stopped at (nothing since changed the queue).
        announce(prefix .. ':' .. head, '0', mode)
    end
    return {1, 0}
end
return other_count(held, expected)

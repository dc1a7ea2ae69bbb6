-- Release receipts (engine/counted.rs): a final release leaves the hold's
-- episode (the releasing client's own id of that hold) under {NAME}:locksmith_released:<field> for a short while,
-- so a resend of the same release can tell "an earlier send of mine freed
-- it" (the receipt is there) from "the hold was already gone" (expired,
-- force-unlocked, wiped by a restart or a failover: no receipt).
local function receipt_key(key, field)
    if key:find('{', 1, true) then
        return key .. ':locksmith_released:' .. field
    end
    return '{' .. key .. '}:locksmith_released:' .. field
end

-- Leaves the receipt of a final release (before the release itself is
-- written, so a refused write, an ACL without the key, frees nothing; the
-- fair lock's purge of waiters passed as dead may come before it); a ttl
-- of '0' leaves none.
local function leave_receipt(key, field, episode, ttl)
    if ttl ~= '0' then
        redis.call('set', receipt_key(key, field), episode, 'px', ttl)
    end
end

-- The answer of a release that finds `held` holds of its owner where it
-- expected `expected`: {4, held} nothing changed (a resend whose first send
-- landed, or the undo of an acquire that never did), {0, held} not held as
-- the owner believes.
local function other_count(held, expected)
    if held == expected - 1 then
        return {4, held}
    end
    return {0, held}
end

-- The answer of a release that finds no hold of `field`: {1, 0} when it is
-- a resend of a final release (`expected` 1) whose earlier send freed this
-- very hold (its receipt is there), {0, 0} (not held) otherwise.
local function gone_answer(key, field, expected, episode)
    if tonumber(expected) == 1 and redis.call('get', receipt_key(key, field)) == episode then
        return {1, 0}
    end
    return {0, 0}
end

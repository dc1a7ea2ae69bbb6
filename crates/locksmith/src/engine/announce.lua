-- Shared prelude, prepended to every script that announces a change.
-- announce(channel, message, mode) publishes the way the client's waiters
-- (and Redisson's) listen: mode 'p' PUBLISH, 's' SPUBLISH (sharded, on a
-- cluster), 'b' both, 'n' neither (an undo of a grant nobody saw).
local function announce(channel, message, mode)
    if mode == 'n' then
        return
    end
    if mode ~= 's' then
        redis.call('publish', channel, message)
    end
    if mode ~= 'p' then
        redis.call('spublish', channel, message)
    end
end

-- The most connections listening on the channel either way the client
-- announces (the caller's own client counts as one each way).
local function listeners(channel, mode)
    local n = 0
    if mode ~= 's' then
        n = redis.call('pubsub', 'numsub', channel)[2]
    end
    if mode ~= 'p' then
        n = math.max(n, redis.call('pubsub', 'shardnumsub', channel)[2])
    end
    return n
end


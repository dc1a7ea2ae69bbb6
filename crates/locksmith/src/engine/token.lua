-- next_token(key): the next fencing token from counter `key` (INCR). A
-- counter that does not exist yet (a new lock, or a server that lost its
-- data: restarted without persistence, flushed) starts from the server's
-- clock in microseconds instead of from 1, so tokens keep increasing
-- across such a loss as long as the server's clock does not step back
-- and grants come less than once per microsecond. Redisson INCRs the
-- same key and continues from there.
local function next_token(key)
    local token = redis.call('incr', key)
    if token == 1 then
        local now = redis.call('time')
        token = tonumber(now[1]) * 1000000 + tonumber(now[2])
        redis.call('set', key, string.format('%.0f', token))
    end
    return token
end

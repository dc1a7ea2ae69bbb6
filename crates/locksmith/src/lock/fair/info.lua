-- Read a fair lock's state atomically (read-only).
-- KEYS[1]  lock hash
-- KEYS[2]  queue list
-- KEYS[3]  fencing counter
-- Returns {flat HGETALL of the hash, PTTL of the hash, counter or false,
-- the queue in order}.
return {redis.call('hgetall', KEYS[1]), redis.call('pttl', KEYS[1]),
    redis.call('get', KEYS[3]), redis.call('lrange', KEYS[2], 0, -1)}

-- Read a read-write lock's state atomically (read-only).
-- KEYS[1]  lock hash
-- KEYS[2]  fencing counter
-- KEYS[3]  waiting-writers zset
-- Returns {flat HGETALL of the hash, PTTL of the hash, counter or false,
-- number of writers waiting with a preference claim}.
return {redis.call('hgetall', KEYS[1]), redis.call('pttl', KEYS[1]),
    redis.call('get', KEYS[2]), redis.call('zcard', KEYS[3])}

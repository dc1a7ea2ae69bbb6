-- Read a lock's state atomically (a script, not MULTI: a cluster client
-- resends a script that met MOVED, not a transaction).
-- KEYS[1]  lock hash
-- KEYS[2]  fencing counter
-- Returns {flat HGETALL of the hash, PTTL of the hash, counter or false}.
return {redis.call('hgetall', KEYS[1]), redis.call('pttl', KEYS[1]),
    redis.call('get', KEYS[2])}

-- each_request(nkeys, nargs, request) for one call that carries the
-- requests of several slots served by one cluster node (this variant of a
-- batch script is sent with the allow-cross-slot-keys flag, Redis 7 and
-- later, and declares no keys: the client sends it to the node itself).
--   KEYS  none
--   ARGV  every request's arguments, nargs per request, in request order;
--         then every request's keys, nkeys per request, in request order;
--         then per slot, in request order, its probe key (a key of that
--         slot that never exists) and how many requests it has; then the
--         number of slots
-- Before a slot's requests run, its probe key is read. An error says
-- this node does not serve the whole slot (the client's view of the slots
-- is stale, or the slot is being migrated and some of its keys may have
-- left already): the slot's requests then answer {-10, message} without
-- running, and the client sends them again in a call of their own slot. A
-- slot whose probe passes is served whole by this node for the rest of
-- the script (a script runs atomically), so its requests run as they
-- would in a call of their own.
-- Answers one reply per request, in request order, as each_request in
-- batch.lua does.
-- Every request reads its keys from this table (the body's functions see
-- this local, not the global KEYS).
local KEYS = {}
local function each_request(nkeys, nargs, request)
    local last = #ARGV
    local slots = tonumber(ARGV[last])
    -- The slot table: slot j's probe at table_at + 2j - 1, its count after.
    local table_at = last - 2 * slots - 1
    local requests = 0
    for j = 1, slots do
        requests = requests + tonumber(ARGV[table_at + 2 * j])
    end
    local keys_at = table_at - requests * nkeys
    for i = 1, requests * nkeys do
        KEYS[i] = ARGV[keys_at + i]
    end
    local out = {}
    local i = 0
    for j = 1, slots do
        local count = tonumber(ARGV[table_at + 2 * j])
        local served, err = pcall(redis.call, 'exists', ARGV[table_at + 2 * j - 1])
        for r = i + 1, i + count do
            if served then
                local ok, reply = pcall(request, nkeys * (r - 1), nargs * (r - 1))
                if ok then
                    out[r] = reply
                else
                    out[r] = {-2, type(reply) == 'table' and reply.err or tostring(reply)}
                end
            else
                out[r] = {-10, type(err) == 'table' and err.err or tostring(err)}
            end
        end
        i = i + count
    end
    return out
end

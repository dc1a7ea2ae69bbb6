-- each_request(nkeys, nargs, request): the loop of a batch script. KEYS and
-- ARGV hold nkeys and nargs per request, in request order; request(k, a)
-- runs one request whose KEYS start after k and ARGV after a. Answers one
-- reply per request, {-2, message} for a request that failed alone (a
-- wrong-type key), so its error does not fail the others of the batch.
local function each_request(nkeys, nargs, request)
    local out = {}
    for i = 1, #ARGV / nargs do
        local ok, reply = pcall(request, nkeys * (i - 1), nargs * (i - 1))
        if ok then
            out[i] = reply
        else
            out[i] = {-2, type(reply) == 'table' and reply.err or tostring(reply)}
        end
    end
    return out
end

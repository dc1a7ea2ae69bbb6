-- each_hold(renew): the loop of a renewal script (the watchdog's batch,
-- engine/renewal.rs). KEYS[i] is a hold's key, ARGV[2i-1] its owner (as
-- the kind records it) and ARGV[2i] the lease in milliseconds; renew(key,
-- owner, lease) answers 1 when it extended the owner's hold and 0 when the
-- owner no longer holds it. A renewal extends only a hold the owner still
-- has, never re-creates one, and never cuts the expiry of a key other
-- holds share (such a key keeps the longer of its expiry and the lease).
-- Answers one integer per hold.
local function each_hold(renew)
    local out = {}
    for i, key in ipairs(KEYS) do
        out[i] = renew(key, ARGV[2 * i - 1], tonumber(ARGV[2 * i]))
    end
    return out
end

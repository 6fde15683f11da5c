-- renew.lua: extend the owner's lease. KEYS[1] lock (the only key sent);
-- ARGV[1] owner id, ARGV[2] ttl ms.
-- Returns {1, s, us} when extended, {0, s, us} when the owner no longer holds
-- the key, where s, us is the server's TIME: the client compares it with
-- its own clock to tell when the server's clock has jumped ahead (grant.go).
-- It runs alone, without common.lua, which it would pay for at every run.
-- The holder's record is "owner|renewed_ms|ttl_ms|token|mode|since_ms|meta"
-- (common.lua); renewing sets renewed to now and ttl to the new one.
local lock, owner, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now_ms_s = t[1] .. string.sub(string.sub('00000' .. t[2], -6), 1, 3)
local ms = tonumber(now_ms_s)
-- The owner's record is in its own field, or in 'o' (common.lua).
local r = redis.call('HMGET', lock, owner, 'o', 'k')
local slot, rec = owner, r[1]
if not rec and r[2] and string.sub(r[2], 1, #owner + 1) == owner .. '|' then
  slot, rec = 'o', r[2]
end
local o, renewed, old_ttl, rest
if rec then
  o, renewed, old_ttl, rest = string.match(rec, '^(%x+)|(%d+)|(%d+)|(.*)$')
end
-- A record whose deadline has passed is gone, as an expired key would be:
-- others may have been granted its place.
if not renewed or tonumber(renewed) + tonumber(old_ttl) < ms then
  return {0, t[1], t[2]}
end
redis.call('HSET', lock, slot, o .. '|' .. now_ms_s .. '|' .. ARGV[2] .. '|' .. rest)
-- The hash lives until the latest deadline of its holders: extend it only
-- if ours is now the latest (another holder may have a longer TTL).
if redis.call('PTTL', lock) < ttl then
  redis.call('PEXPIRE', lock, ttl)
end
-- An election's leader tells its observers how long it now lives, so
-- that they need not read to learn it (watch.go): "r<ttl ms>" on the
-- channel of common.lua's notices. Other kinds publish nothing.
if r[3] == 'election' then
  redis.call('PUBLISH', lock .. ':n', 'r' .. ARGV[2])
end
return {1, t[1], t[2]}

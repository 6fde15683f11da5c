-- renew.lua: extend the owner's lease. KEYS[1] lock (the only key sent);
-- ARGV[1] owner id, ARGV[2] ttl ms.
-- Returns {1, s, us} when extended, {0, s, us} when the owner no longer holds
-- the key, where s, us is the server's TIME: the client compares it with
-- its own clock to tell when the server's clock has jumped ahead (grant.go).
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local _, ms = now()
local t = {string.sub(now_us_s, 1, -7), string.sub(now_us_s, -6)}
-- The owner's record is in its own field, or in 'o' (common.lua).
local r = redis.call('HMGET', lock, owner, 'o')
local slot, rec = owner, r[1]
if not rec and r[2] and string.sub(r[2], 1, #owner + 1) == owner .. '|' then
  slot, rec = 'o', r[2]
end
local o, deadline, rest
if rec then
  o, deadline, rest = string.match(rec, '^(%x+)|(%d+)|(.*)$')
end
-- A record whose deadline has passed is gone, as an expired key would be:
-- others may have been granted its place.
if not deadline or tonumber(deadline) < ms then
  return {0, t[1], t[2]}
end
redis.call('HSET', lock, slot, o .. '|' .. fmt(ms + ttl) .. '|' .. rest)
-- The hash lives until the latest deadline of its holders: extend it only
-- if ours is now the latest (another holder may have a longer TTL).
if redis.call('PTTL', lock) < ttl then
  redis.call('PEXPIRE', lock, ttl)
end
return {1, t[1], t[2]}

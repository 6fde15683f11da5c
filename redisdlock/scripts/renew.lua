-- renew.lua: extend the owner's lease. KEYS[1] lock (the only key sent);
-- ARGV[1] owner id, ARGV[2] ttl ms.
-- Returns {1, s, us} when extended, {0, s, us} when the owner no longer holds
-- the lock, where s, us is the server's TIME: the client compares it with
-- its own clock to tell when the server's clock has jumped ahead (grant.go).
local t = redis.call('TIME')
if redis.call('HGET', lock, 'owner') ~= ARGV[1] then
  return {0, t[1], t[2]}
end
redis.call('PEXPIRE', lock, tonumber(ARGV[2]))
return {1, t[1], t[2]}

-- renew.lua: extend the owner's lease. ARGV[1] owner id, ARGV[2] ttl ms.
-- Returns 1 when extended, 0 when the owner no longer holds the lock.
if redis.call('HGET', lock, 'owner') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', lock, tonumber(ARGV[2]))
return 1

-- release.lua: give up the lock or a place in its queue, and hand the lock to
-- the next live waiter. It never touches a lock held by another owner.
-- ARGV[1] owner id.
-- Returns 1 when the owner held the lock (now released), 0 otherwise.
local owner = ARGV[1]
remove_waiter(owner)
local holder = redis.call('HGET', lock, 'owner')
if holder ~= owner then
  if holder and redis.call('HGET', lock, 'prev') == owner then
    -- Our earlier attempt already handed the lock on; its reply was lost.
    return 1
  end
  return 0
end
if hand_off(owner) then
  return 1
end
local token = tonumber(redis.call('HGET', lock, 'token'))
redis.call('DEL', lock)
if now_us <= token then
  -- The next grant could read the same microsecond from TIME: keep the
  -- token for a moment so that the next one is still larger.
  redis.call('SET', fence, fmt(token), 'PX', 1000)
end
return 1

-- release.lua: give up the lock or a place in its queue, and hand the lock to
-- the next live waiter. It never touches a lock held by another owner.
-- ARGV[1] owner id.
-- Returns 1 when the owner held the lock (now released), 0 otherwise.
local owner = ARGV[1]
local h = redis.call('HMGET', lock, 'owner', 'token', 'prev')
local holder, token = h[1], h[2]
if holder ~= owner then
  -- Not the holder: a cancelled Lock leaving the queue (a holder is never
  -- queued: every grant pops its owner from the queue).
  remove_waiter(owner)
  if holder and h[3] == owner then
    -- Our earlier attempt already handed the lock on; its reply was lost.
    return 1
  end
  return 0
end
if hand_off(owner, token) then
  return 1
end
redis.call('DEL', lock)
if now() <= tonumber(token) then
  -- The next grant could read the same microsecond from TIME: keep the
  -- token for a moment so that the next one is still larger.
  redis.call('SET', fence, token, 'PX', 1000)
end
return 1

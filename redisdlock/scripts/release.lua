-- release.lua: give up the lock or a place in its queue, and hand the lock to
-- the next live waiter. It never touches a lock held by another owner.
-- ARGV[1] owner id, ARGV[2] the owner's token ('0' for a Lock that was never
-- granted and leaves the queue).
-- Returns 1 when the owner held the lock and nobody else has been granted it
-- since (released now, or by an earlier attempt whose reply was lost), 0
-- otherwise.
local owner = ARGV[1]
local h = redis.call('HMGET', lock, 'owner', 'token', 'prev')
local holder, token = h[1], h[2]
if holder ~= owner then
  -- Not the holder: a cancelled Lock leaving the queue (a holder is never
  -- queued: every grant pops its owner from the queue), or a release resent
  -- after its reply was lost.
  remove_waiter(owner)
  if holder then
    -- Ours only if our earlier attempt handed the lock on.
    if h[3] == owner then
      return 1
    end
    return 0
  end
  -- Free. Every grant writes its token to the fence, so a fence that still
  -- holds ours means nobody has been granted the key since: our earlier
  -- attempt released it, or our grant expired with nobody taking it.
  -- Either way no other owner held it after us, which is what 1 says.
  if redis.call('GET', fence) == ARGV[2] then
    return 1
  end
  return 0
end
if hand_off(owner, token) then
  return 1
end
-- Nobody waits. The fence has our token already (grant), for the next one.
redis.call('DEL', lock)
return 1

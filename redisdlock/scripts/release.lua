-- release.lua: give up a holder's grant or a place in the queue, and grant
-- every waiter the rule then admits. It never touches another owner's grant.
-- ARGV[1] owner id, ARGV[2] the owner's token ('0' for an attempt that was
-- never granted and leaves the queue).
-- Returns 1 when the owner held the key and nobody was granted its place
-- since (released now, or by an earlier attempt whose reply was lost), 0
-- otherwise.
local owner = ARGV[1]
read_state(owner)
if not S.mine then
  -- Not a holder: a cancelled attempt leaving the queue (a holder is never
  -- queued: every grant pops its owner from the queue), or a release resent
  -- after its reply was lost.
  -- LREM is O(queue length), but it only runs for an owner that has an
  -- entry, i.e. once per cancelled waiter.
  if redis.call('HDEL', waiters, owner) == 1 then
    redis.call('LREM', queue, 1, owner)
  end
  if S.exists then
    -- Ours only if our earlier attempt was the latest release.
    if S.prev == owner then
      return 1
    end
    return 0
  end
  -- Free. Every grant writes its token to the fence, so a fence that still
  -- holds ours means nobody has been granted the key since: our earlier
  -- attempt released it, or our grant expired with nobody taking it.
  if redis.call('GET', fence) == ARGV[2] then
    return 1
  end
  return 0
end
-- Our record, live or not. A dead one still here means nobody has been
-- granted the key since it died (every grant drops the dead records), so
-- releasing it is as good as releasing in time: 1 either way. Its field is
-- deleted, or reused by the first grant if it is 'o'.
S.drop = S.slots[S.mine]
tally()
-- The key's limit, from its kind label (driver.KindLabel).
local limit = 1
if S.label_s == 'rwmutex' then
  limit = 0
elseif S.label_s then
  limit = tonumber(string.match(S.label_s, '^semaphore/(%d+)$')) or 1
end
serve(limit, nil)
if S.live == 0 then
  -- Nobody holds, nobody waits (serve found the queue empty). The fence
  -- has the latest token already, for the next grant.
  redis.call('DEL', lock)
  return 1
end
flush(S.label_s or 'lock', owner)
return 1

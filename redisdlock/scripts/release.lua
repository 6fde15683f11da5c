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
  -- after its reply was lost. The answer is decided first, from the state
  -- before anything below grants.
  local released = 0
  if S.exists then
    -- Ours only if our earlier attempt was the latest release.
    if S.prev == owner then
      released = 1
    end
  elseif redis.call('GET', fence) == ARGV[2] then
    -- Free. Every grant writes its token to the fence, so a fence that
    -- still holds ours means nobody has been granted the key since: our
    -- earlier attempt released it, or our grant expired with nobody
    -- taking it.
    released = 1
  end
  local rec = redis.call('HGET', waiters, owner)
  if rec then
    -- LREM is O(queue length), but it only runs for an owner that has an
    -- entry, i.e. once per cancelled waiter.
    redis.call('HDEL', waiters, owner)
    redis.call('LREM', queue, 1, owner)
    -- A waiter that leaves may have been what blocked the ones behind it:
    -- a writer ahead of readers, or an exclusive head ahead of shared
    -- ones. Grant whoever the rule now admits, as a release does, so that
    -- they are not left for their next poll. The key's kind is the
    -- leaving waiter's: it joined only as the key's kind.
    local _, _, _, _, label = parse_waiter(rec)
    if label then
      tally()
      serve(label_limit(label), nil)
      if S.granted > 0 then
        flush(label)
      end
    end
  end
  return released
end
-- Our record, live or not. A dead one still here means nobody has been
-- granted the key since it died (every grant drops the dead records), so
-- releasing it is as good as releasing in time: 1 either way. Its field is
-- deleted, or reused by the first grant if it is 'o'.
S.drop = S.slots[S.mine]
tally()
serve(label_limit(S.label_s), nil)
if S.live == 0 then
  -- Nobody holds, nobody waits (serve found the queue empty). The fence
  -- has the latest token already, for the next grant.
  redis.call('DEL', lock)
  if S.label_s == 'election' then
    notify_observers()
  end
  return 1
end
flush(S.label_s or 'lock', owner)
return 1

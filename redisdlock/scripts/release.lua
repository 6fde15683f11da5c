-- release.lua: give up a holder's grant or a place in the queue, and grant
-- every waiter the rule then admits. It never touches another owner's grant.
-- ARGV[1] owner id, ARGV[2] the owner's token ('0' for an attempt that was
-- never granted and leaves the queue).
-- Returns 1 when the owner held the key and nobody was granted its place
-- since (released now, or by an earlier attempt whose reply was lost), 0
-- otherwise.
local owner = ARGV[1]
local st = read_state()
local mine = find_holder(st, owner)
if not mine then
  -- Not a holder: a cancelled attempt leaving the queue (a holder is never
  -- queued: every grant pops its owner from the queue), or a release resent
  -- after its reply was lost.
  remove_waiter(owner)
  if st.exists then
    -- Ours only if our earlier attempt was the latest release.
    if st.prev == owner then
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
-- releasing it is as good as releasing in time: 1 either way.
local c = tally(st, mine)
local b = new_batch(st, c)
b.fresh = false -- the hash stays: it has the kind label
b.removed[mine.slot] = true
if mine.slot == 'o' then
  b.o_free = true
end
serve(b, label_limit(st.label), nil)
if b.live == 0 then
  -- Nobody holds, nobody waits (serve found the queue empty). The fence
  -- has the latest token already, for the next grant.
  redis.call('DEL', lock)
  return 1
end
flush(b, st.label or 'lock', owner)
return 1

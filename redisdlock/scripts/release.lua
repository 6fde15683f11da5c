-- release.lua: give up a holder's grant or a place in the queue, and grant
-- every waiter the rule then admits. It never touches another owner's grant.
-- ARGV[1] owner id, ARGV[2] the owner's token ('0' for an attempt that was
-- never granted and leaves the queue).
-- Returns 1 when the owner held the key and nobody was granted its place
-- before its release (released now, or by an earlier attempt whose reply was
-- lost), 0 otherwise, and when that cannot be told any more (a false alarm,
-- on the safe side: docs/redis.md, "Lost replies").
local owner = ARGV[1]
read_state(owner)
if not S.mine then
  -- Not a holder: a cancelled attempt leaving the queue (a holder is never
  -- queued: every grant pops its owner from the queue), or a release resent
  -- after its reply was lost. The answer is decided first, from the state
  -- before anything below grants.
  local released = 0
  if S.exists and S.prev == owner then
    -- Ours: our earlier attempt was the latest release, and holders stayed.
    released = 1
  elseif ARGV[2] ~= '0' then
    -- Our earlier attempt, if it ran, found our record and so released in
    -- time (a record still there, dead, means nobody was granted since it
    -- died: see below). If it left the key free, it renamed the hash to the
    -- slot's trace with our record alone; the trace lasts until our deadline
    -- or the slot's next such release, whichever comes first.
    local r = redis.call('HMGET', trace, 'o', owner, 'p')
    if r[2] or r[3] == owner or (r[1] and string.find(r[1], owner .. '|', 1, true) == 1) then
      released = 1
    elseif tonumber(redis.call('GET', record)) == tonumber(ARGV[2]) then
      -- Nobody of the slot, so nobody of this key, was granted a token
      -- above ours: our earlier attempt released the key, or our grant
      -- expired with nobody taking it. Any grant of this key after ours
      -- raised the record above our token (a key's tokens increase), so an
      -- equal record is proof; a higher one proves nothing, and 0 is the
      -- safe answer (a false alarm if our earlier attempt did release).
      released = 1
    end
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
if string.find(S.recs[S.mine], '+', 1, true) then
  local _, ms = now()
  local until_ms, _, granted_until = holder_deadline(S.recs[S.mine])
  if granted_until < ms and until_ms >= ms then
    -- Its grant ended (expired) and its lock-delay runs: the record keeps
    -- the key from the others until then, whatever its owner does.
    return 0
  end
end
S.drop = S.slots[S.mine]
tally()
serve(label_limit(S.label_s), nil)
if S.live == 0 then
  -- Nobody holds, nobody waits (serve found the queue empty). The slot's
  -- record has the latest token already, for the next grant. The hash
  -- becomes the slot's trace, replacing the previous one, for a resend of
  -- this release after a lost reply (above): RENAME costs what DEL did, and
  -- keeps the hash's expiry, our deadline at least. Only our record may be
  -- in it, since its presence is what proves our release: dead holders'
  -- are deleted first (rare: holders of a shared kind that crashed).
  local dead = S.dead or {}
  if S.o_dead and S.drop ~= 'o' then
    dead[#dead + 1] = 'o'
    dead[#dead + 1] = 'm'
  end
  if #dead > 0 then
    redis.call('HDEL', lock, unpack(dead))
  end
  redis.call('RENAME', lock, trace)
  if S.label_s == 'election' then
    notify_observers()
  end
  return 1
end
flush(S.label_s or 'lock', owner)
return 1

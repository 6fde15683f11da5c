-- common.lua is prepended to every dlock script. All keys of one lock share a
-- Redis Cluster hash slot through the hash tag {<escaped key>}:
--   KEYS[1] lock    hash of the holders (docs/redis.md, "Keys"):
--                     'o' or an owner id ->
--                       "owner|renewed_ms|ttl_ms|token|mode|since_ms|meta"
--                       one field per holder, valid until renewed + ttl;
--                       the first holder granted while 'o' is unused takes
--                       'o', so that a lock's hand-off overwrites one field
--                       instead of deleting one and writing another;
--                       since_ms is empty when it is the token's ms (the
--                       token is the grant's µs, as it usually is);
--                       ttl_ms is "ttl_ms+delay_ms" for a holder with a
--                       lock-delay (driver.AcquireRequest.LockDelay): its
--                       record then stays, and counts as a holder of its
--                       mode, until delay_ms after its deadline (an
--                       expiry), and its own Release finds it gone;
--                     '!' .. owner a holder revoked with a lock-delay
--                       (revoke.lua): "!owner|revoked_ms|0+delay_ms|token|
--                       mode|since_ms|meta", a holder of its mode until
--                       revoked_ms + delay_ms, which nobody renews or
--                       releases;
--                     'm' the metadata of 'o''s holder, whose record has
--                       none: so a lock's hash holds no value over Redis's
--                       hash-max-listpack-value (64 bytes) with dlock's
--                       default metadata and a TTL under 1,000 s, and
--                       keeps the compact listpack encoding (owner ids
--                       are 22 characters, owner.go's ownerArg);
--                     'k' the kind label (driver.KindLabel), absent for a lock;
--                     't' the token of the latest grant;
--                     'p' the owner of the latest release (lost replies);
--                     'q' present when the queue may hold somebody: set
--                       by every join and by every grant of this file, so
--                       that a lock's release whose hash lacks it (a key
--                       taken by acquire_free.lua, nobody ever queued)
--                       renames it without reading the queue.
--                   Its expiry is at least the latest deadline of its live
--                   holders: every grant and renewal that would pass it
--                   moves it.
--   KEYS[2] queue   list of waiting owner ids, arrival order.
--   KEYS[3] waiters hash: owner id ->
--                     "deadline_ms|ttl_ms|since_ms|mode|kind label|channel|meta"
--                     (ttl_ms as the holder's record will have it)
--   KEYS[4] fence   string: the token of the key's latest grant, written by
--                   earlier versions for every key ever locked (no expiry).
--                   Read with the record below and deleted by the next grant
--                   that finds the hash gone, so old fences drain.
--   KEYS[5] record  string: a token at least as high as every token granted
--                   to any key of this Redis Cluster slot (no expiry): its
--                   name's hash tag maps to the slot (keys.go), so it is one
--                   key per slot used, whatever the number of keys ever
--                   locked. The next grant of a key whose hash is gone takes
--                   a token above it, whatever the server's clock does.
--   KEYS[6] trace   hash: the holders hash of the slot's latest release that
--                   left its key free, renamed (release.lua), with the
--                   releaser's record alone and the hash's expiry: a
--                   release resent after a lost reply finds its own record
--                   in it.
-- renew.lua is sent KEYS[1] only, and runs without this file: it touches
-- nothing else. acquire.lua is sent the first five: it never touches the
-- trace (trace is nil there).
-- Modes are 'x' (exclusive) and 's' (shared). Every holder and waiter of a
-- key has the same kind label: a request with another is refused before
-- anything is written (acquire.lua).
-- The queue and the waiters hash always hold the same owner ids: every script
-- adds or removes an id in both, and both get the same expiry.
-- Times come from the server's clock (TIME), never from a client's.
--
-- Cost. Every redis.call is server time on the path of a grant, and so is
-- the Lua around them: on the test machine a table with a few fields costs
-- ≈ 0.7 µs, a number formatted ≈ 1 µs, a string.match ≈ 1.3 µs — as much
-- as a command. So the scripts read each thing once (one HGETALL of the
-- holders), keep one script's state in the locals below rather than in
-- tables, store times as the strings TIME and ARGV give (a holder's
-- deadline is renewed + ttl, added when read, never formatted), and parse
-- a record only when its content matters: a lock's release finds its own
-- record by its prefix and parses nothing.
local lock, queue, waiters, fence, record, trace = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

-- now returns the server time in µs and ms, reading it on first use only:
-- the retried-request paths and a lock's release with nobody waiting never
-- need it. It also keeps both as strings, cut from TIME's reply ({seconds,
-- microseconds}).
local now_us, now_ms, now_us_s, now_ms_s
local function now()
  if not now_us then
    local t = redis.call('TIME')
    local frac = string.sub('00000' .. t[2], -6)
    now_us_s = t[1] .. frac
    now_ms_s = t[1] .. string.sub(frac, 1, 3)
    now_us = tonumber(now_us_s)
    now_ms = tonumber(now_ms_s)
  end
  return now_us, now_ms
end

local function fmt(n)
  return string.format('%.0f', n)
end

-- The state of one script run, in one table: locals captured by the
-- functions below would cost more (every function is created anew at each
-- run, and each captured local is looked up then).
--   exists: the holders hash exists; label_s, last, prev, q, meta_o: its
--   'k', 't', 'p', 'q' (present), 'm'; slots, recs: its holders' fields and records (nil when none),
--   nrec: their number; mine: the index of
--   the caller's record, if any (read_state).
--   shared, excl, live: the live holders and the grants of this run;
--   mindl, maxdl: their earliest and latest deadlines, ms (tally, grant).
--   o_free: 'o' is unused; o_taken: a grant of this run took it; o_dead: it
--   holds a dead record. dead: fields of dead holders to delete; drop: the
--   field of the caller's released record; fresh: the hash holds only dead
--   records, replace it whole. hset, pubs: HSET's and the notices'
--   arguments; granted: grants of this run; pexp: PEXPIRE's argument when
--   a grant's deadline is the latest. fenced: the record was read by this
--   run (S.last is then above it); legacy: the key has an old fence.
-- Every field is set here (false for none) so that the table is sized once.
local S = {exists = false, label_s = false, last = false, prev = false, slots = false,
  recs = false, nrec = 0, mine = false, shared = 0, excl = 0, live = 0, mindl = false,
  maxdl = 0, o_free = true, o_taken = false, o_dead = false, dead = false, drop = false,
  fresh = false, hset = false, pubs = false, granted = 0, pexp = false, fenced = false,
  legacy = false, q = false, meta_o = false}

-- parse_waiter splits a waiter record: deadline (a number), ttl, since,
-- mode, label, channel, meta. A record that does not parse (written by
-- another version) counts as dead.
local function parse_waiter(rec)
  local deadline, ttl, since, mode, label, channel, meta =
    string.match(rec, '^(%d+)|([^|]+)|(%d+)|(%a)|([^|]*)|([^|]*)|(.*)$')
  return tonumber(deadline) or 0, ttl, since, mode, label, channel, meta
end

-- label_limit returns the limit of a kind label (driver.KindLabel): 1 for
-- a lock (false: no label), 0 (none) for a read-write lock.
local function label_limit(label)
  if not label or label == 'lock' then
    return 1
  elseif label == 'rwmutex' then
    return 0
  end
  return tonumber(string.match(label, '^semaphore/(%d+)$')) or 1
end

-- holder_deadline returns a holder record's end as a holder (ms: its
-- deadline, plus its lock-delay if any), its mode, and its grant's
-- deadline (ms), past which its owner no longer holds it.
local function holder_deadline(rec)
  local renewed, ttl, delay, mode = string.match(rec, '^[^|]+|(%d+)|(%d+)%+?(%d*)|%d+|(%a)|')
  if not renewed then
    return 0, 'x', 0
  end
  local dl = tonumber(renewed) + tonumber(ttl)
  if delay ~= '' then
    return dl + tonumber(delay), mode, dl
  end
  return dl, mode, dl
end

-- split_ttl returns a record's ttl field ("ttl_ms" or "ttl_ms+delay_ms")
-- as the ttl and the delay in ms, numbers.
local function split_ttl(ttl)
  local plus = string.find(ttl, '+', 1, true)
  if not plus then
    return tonumber(ttl), 0
  end
  return tonumber(string.sub(ttl, 1, plus - 1)), tonumber(string.sub(ttl, plus + 1))
end

-- read_state reads the holders hash once, and finds owner's record: in the
-- field named after it, or in 'o' (which starts with the owner id).
local function read_state(owner)
  local h = redis.call('HGETALL', lock)
  local n = 0
  for i = 1, #h, 2 do
    local f, v = h[i], h[i + 1]
    S.exists = true
    if f == 'k' then
      S.label_s = v
    elseif f == 't' then
      S.last = v
    elseif f == 'p' then
      S.prev = v
    elseif f == 'q' then
      S.q = true
    elseif f == 'm' then
      S.meta_o = v
    else
      if n == 0 then
        S.slots, S.recs = {}, {}
      end
      n = n + 1
      S.slots[n], S.recs[n] = f, v
      if f == owner or (f == 'o' and string.find(v, owner, 1, true) == 1) then
        S.mine = n
      end
    end
  end
  S.nrec = n
end

-- tally counts the live holders but the caller's (a record lives while its
-- deadline has not passed, as Redis keeps a key until its expiry has
-- passed), and collects the dead ones for removal. It reads the clock
-- only when there is somebody to count.
local function tally()
  for i = 1, S.nrec do
    if i ~= S.mine then
      local _, ms = now()
      local d, m = holder_deadline(S.recs[i])
      if d >= ms then
        S.live = S.live + 1
        if m == 'x' then
          S.excl = S.excl + 1
        else
          S.shared = S.shared + 1
        end
        if not S.mindl or d < S.mindl then
          S.mindl = d
        end
        if d > S.maxdl then
          S.maxdl = d
        end
        if S.slots[i] == 'o' then
          S.o_free = false
        end
      elseif S.slots[i] == 'o' then
        S.o_dead = true -- free; deleted unless a grant reuses it
      else
        S.dead = S.dead or {}
        S.dead[#S.dead + 1] = S.slots[i]
      end
    end
  end
  -- A hash with nobody live in it is what holders that died left: it is
  -- replaced whole (its kind label may be another's).
  S.fresh = S.exists and S.live == 0 and not S.mine
end

-- grant makes owner a holder with a fresh fencing token and returns it (as a
-- string); flush writes it. The token is max(latest token + 1, server clock
-- in µs): above every earlier grant's while the server keeps its data (the
-- latest is the hash's 't' or, when the hash is gone, the slot's record,
-- which is at least every token of the slot, or an old fence above it),
-- however its clock steps, and increasing by the clock alone after a
-- restart that lost every key.
local function grant(owner, ttl, mode, meta)
  local us, ms = now()
  if not S.last and not S.fenced then
    -- One MGET reads both: the old fence is false once drained.
    local r = redis.call('MGET', record, fence)
    S.last, S.legacy, S.fenced = r[1], r[2], true
    if r[2] and (not r[1] or tonumber(r[2]) > tonumber(r[1])) then
      S.last = r[2]
    end
  end
  local token = now_us_s
  if S.last and tonumber(S.last) >= us then
    token = fmt(tonumber(S.last) + 1)
  end
  S.last = token
  -- A lock-delay keeps the record a holder that much longer.
  local t, delay = split_ttl(ttl)
  local dl = ms + t + delay
  if dl > S.maxdl then
    -- The hash must live until this deadline: later than any live
    -- holder's, so PEXPIRE ttl shortens nobody's.
    S.maxdl, S.pexp = dl, ttl
    if delay > 0 then
      S.pexp = fmt(t + delay)
    end
  end
  if not S.mindl or dl < S.mindl then
    S.mindl = dl
  end
  local slot = owner
  S.hset = S.hset or {}
  local n = #S.hset
  if S.o_free then
    slot, S.o_free, S.o_taken = 'o', false, true
    S.hset[n + 1], S.hset[n + 2], n = 'm', meta, n + 2
    meta = ''
  end
  S.hset[n + 1] = slot
  local since = ''
  if token ~= now_us_s then
    since = now_ms_s
  end
  S.hset[n + 2] = owner .. '|' .. now_ms_s .. '|' .. ttl .. '|' .. token .. '|' .. mode .. '|' .. since .. '|' .. meta
  if mode == 'x' then
    S.excl = S.excl + 1
  else
    S.shared = S.shared + 1
  end
  S.live = S.live + 1
  S.granted = S.granted + 1
  return token
end

-- serve grants, in queue order, every waiter at the head of the queue that
-- the grant rule admits, and tells each on its client's channel
-- ("owner:token", at flush): exactly the waiters granted are woken. caller
-- is the owner of the script's request, who gets its token back instead of
-- a notice (nil for a release). head, ttl, mode, channel, meta: the live
-- head already read, if any.
-- Returns the caller's token if it was granted, and why serving stopped:
-- 'full' (nobody more can be admitted; the queue was not read), 'empty'
-- (nobody live waits), 'blocked' (the head, returned third, is not
-- admitted, and so nobody behind it is: every entry behind it has it ahead).
-- The rule (driver.Admits): an entry is granted when everything ahead of
-- it is compatible with it and fewer than limit entries are ahead of it
-- (limit 0: no limit); S.shared and S.excl count the entries ahead. It is
-- written out here and in acquire.lua rather than as a function, which
-- would cost its creation at every run (see Cost).
local function serve(limit, caller, head, ttl, mode, channel, meta)
  local token_of_caller, popped
  while true do
    if S.excl > 0 or (limit > 0 and S.shared >= limit) then
      -- Full: nobody of any mode is admitted behind these.
      return token_of_caller, 'full'
    end
    if not head then
      -- The first live waiter; dead ones before it are dropped, each once
      -- (amortised O(1)). With nothing ahead it is admitted whatever its
      -- mode, so it is popped at once (saving an LINDEX); otherwise
      -- peeked, and taken only if admitted.
      local nothing_ahead = S.shared == 0 and S.excl == 0
      while not head do
        local id
        if nothing_ahead then
          id = redis.call('LPOP', queue)
        else
          id = redis.call('LINDEX', queue, 0)
        end
        if not id then
          return token_of_caller, 'empty'
        end
        local rec = redis.call('HGET', waiters, id)
        if rec then
          local _, ms = now()
          local deadline
          deadline, ttl, _, mode, _, channel, meta = parse_waiter(rec)
          if deadline >= ms then
            head, popped = id, nothing_ahead
          end
        end
        if not head then
          redis.call('HDEL', waiters, id)
          if not nothing_ahead then
            redis.call('LPOP', queue)
          end
        end
      end
    end
    if S.excl > 0 or (mode == 'x' and S.shared > 0) then
      return token_of_caller, 'blocked', head
    end
    if not popped then
      redis.call('LPOP', queue)
    end
    redis.call('HDEL', waiters, head)
    local token = grant(head, ttl, mode, meta)
    if head == caller then
      token_of_caller = token
    else
      S.pubs = S.pubs or {}
      S.pubs[#S.pubs + 1] = channel
      S.pubs[#S.pubs + 1] = head .. ':' .. token
    end
    head, popped = nil, false
  end
end

-- notify_observers tells the observers of an election key (driver.Observer,
-- watch.go) that its holders changed: one PUBLISH on the key's own channel,
-- KEYS[1] .. ':n', which shares the key's hash tag. Only election keys pay
-- for it: locks, semaphores and read-write locks have no observers. A
-- holder that dies without releasing runs no script, so nothing is sent
-- then; the observers wake at its deadline by themselves (watch.go), and
-- the candidate whose poll then takes its place (acquire.lua, serve) sends
-- the notice of that grant.
local function notify_observers()
  redis.call('PUBLISH', lock .. ':n', 'c')
end

-- flush writes the run's changes to the holders hash: the records removed
-- (released, or dead), the grants with the latest token and, for a new
-- hash, the kind label; its expiry; the slot's record; the notices. label is the
-- key's kind label; releaser the releasing owner, if any.
local function flush(label, releaser)
  if S.fresh then
    redis.call('DEL', lock)
  else
    if (S.o_dead or S.drop == 'o') and not S.o_taken then
      S.dead = S.dead or {}
      S.dead[#S.dead + 1] = 'o'
      S.dead[#S.dead + 1] = 'm'
    end
    if S.drop and S.drop ~= 'o' then
      S.dead = S.dead or {}
      S.dead[#S.dead + 1] = S.drop
    end
    if S.dead then
      redis.call('HDEL', lock, unpack(S.dead))
    end
  end
  local h = S.hset or {}
  if releaser then
    h[#h + 1] = 'p'
    h[#h + 1] = releaser
  end
  if S.granted > 0 then
    h[#h + 1] = 't'
    h[#h + 1] = S.last
    if S.fresh or not S.q then
      -- Written on every hash this path creates: a queue may be left behind.
      h[#h + 1] = 'q'
      h[#h + 1] = '1'
      S.q = true
    end
    if (S.fresh or not S.exists) and label ~= 'lock' then
      h[#h + 1] = 'k'
      h[#h + 1] = label
    end
  end
  if #h > 0 then
    redis.call('HSET', lock, unpack(h))
  end
  if S.pexp then
    redis.call('PEXPIRE', lock, S.pexp)
  end
  if S.granted > 0 then
    -- The token outlives the hash, which goes with the last release or
    -- its expiry (holders that crashed): the slot's record keeps it for
    -- the next grant, since the clock may step back behind it at any time.
    -- The record only goes up: it also covers the other keys of the slot,
    -- whose tokens may be higher (a key's tokens run ahead of the clock
    -- after a step back, or when granted faster than once per µs).
    if S.fenced then
      -- Read by this run, and below S.last.
      redis.call('SET', record, S.last)
      if S.legacy then
        redis.call('DEL', fence) -- its token is below S.last, now recorded
      end
    else
      -- Not read: write, and put back what was there if it was higher
      -- (rare: the write usually raises it). GETSET rather than SET GET
      -- or ZADD GT, which need Redis 6.2.
      local was = redis.call('GETSET', record, S.last)
      if was and tonumber(was) > tonumber(S.last) then
        redis.call('SET', record, was)
      end
    end
  end
  if S.pubs then
    for i = 1, #S.pubs, 2 do
      redis.call('PUBLISH', S.pubs[i], S.pubs[i + 1])
    end
  end
  if label == 'election' and (S.granted > 0 or releaser) then
    notify_observers()
  end
end

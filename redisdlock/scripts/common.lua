-- common.lua is prepended to every dlock script. All keys of one lock share a
-- Redis Cluster hash slot through the hash tag {<escaped key>}:
--   KEYS[1] lock    hash of the holders (docs/redis.md, "Keys"):
--                     'o' or an owner id -> "owner|deadline_ms|token|mode|since_ms|meta"
--                       one field per holder; the first holder granted
--                       while 'o' is unused takes 'o', so that a lock's
--                       hand-off overwrites one field instead of deleting
--                       one and writing another;
--                     'k' the kind label (driver.KindLabel), absent for a lock;
--                     't' the token of the latest grant (as the fence);
--                     'p' the owner of the latest release (lost replies).
--                   PEXPIRE = the latest deadline of its holders.
--   KEYS[2] queue   list of waiting owner ids, arrival order.
--   KEYS[3] waiters hash: owner id ->
--                     "deadline_ms|ttl_ms|since_ms|mode|kind label|channel|meta"
--   KEYS[4] fence   string: the token of the key's latest grant, written
--                   by every grant and kept for good (no expiry): the next
--                   token is above it whatever the server's clock does, and
--                   a release resent after a lost reply finds in it whether
--                   anybody was granted the key since (release.lua).
-- renew.lua is sent KEYS[1] only: it touches nothing else.
-- Modes are 'x' (exclusive) and 's' (shared). Every holder and waiter of a
-- key has the same kind label: a request with another is refused before
-- anything is written (acquire.lua).
-- The queue and the waiters hash always hold the same owner ids: every script
-- adds or removes an id in both, and both get the same expiry.
-- Times come from the server's clock (TIME), never from a client's. Every
-- redis.call is server time on the path of a grant, so the scripts read each
-- thing once (one HGETALL of the holders) and only what the path taken needs.
local lock, queue, waiters, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- now returns the server time in µs and ms, reading it on first use only:
-- the retried-request paths and a lock's release with nobody waiting never
-- need it. It also keeps both as strings, cut from TIME's reply ({seconds,
-- microseconds}): formatting a number in Lua costs more than the commands
-- around it.
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

-- The grant rule (driver.Admits): an entry is granted when everything ahead
-- of it is compatible with it and fewer than limit entries are ahead of it
-- (limit 0: no limit). shared and excl count the entries ahead.
local function admits(limit, mode, shared, excl)
  if excl > 0 then
    return false
  end
  if mode == 'x' then
    return shared == 0
  end
  return limit == 0 or shared < limit
end

-- full: no entry of any mode is admitted behind these. Then the queue need
-- not be read at all (a held lock, a semaphore with every permit taken).
local function full(limit, shared, excl)
  return excl > 0 or (limit > 0 and shared >= limit)
end

-- label_limit is the limit of a stored kind label (driver.KindLabel).
local function label_limit(label)
  if label == nil or label == 'lock' then
    return 1
  elseif label == 'rwmutex' then
    return 0
  end
  return tonumber(string.match(label, '^semaphore/(%d+)$')) or 1
end

-- parse_waiter splits a waiter record. Only the deadline becomes a number:
-- the rest goes back into commands as the strings they are. A record that
-- does not parse (written by another version) counts as dead.
local function parse_waiter(rec)
  local deadline, ttl, since, mode, label, channel, meta =
    string.match(rec, '^(%d+)|(%d+)|(%d+)|(%a)|([^|]*)|([^|]*)|(.*)$')
  return {deadline = tonumber(deadline) or 0, ttl = ttl, since = since, mode = mode,
    label = label, channel = channel, meta = meta}
end

-- read_state reads the holders hash once. Each holder gets its slot (the
-- field), owner, deadline, token and mode; the rest of the record (since,
-- meta) stays unparsed until inspect.lua needs it.
local function read_state()
  local st = {exists = false, holders = {}}
  local h = redis.call('HGETALL', lock)
  for i = 1, #h, 2 do
    local f, v = h[i], h[i + 1]
    st.exists = true
    if f == 'k' then
      st.label = v
    elseif f == 't' then
      st.last = v
    elseif f == 'p' then
      st.prev = v
    else
      local o, d, tok, m = string.match(v, '^(%x+)|(%d+)|(%d+)|(%a)|')
      st.holders[#st.holders + 1] = {slot = f, owner = o, deadline = tonumber(d) or 0,
        token = tok, mode = m, rec = v}
    end
  end
  return st
end

local function find_holder(st, owner)
  for _, h in ipairs(st.holders) do
    if h.owner == owner then
      return h
    end
  end
  return nil
end

-- tally counts the live holders other than skip (a holder's record lives
-- while its deadline has not passed, as Redis keeps a key until its expiry
-- has passed), their earliest and latest deadlines, and collects the dead
-- ones for removal. It reads the clock only when there is somebody to count.
local function tally(st, skip)
  local c = {shared = 0, excl = 0, live = 0, maxdl = 0, dead = {}, o_free = true}
  for _, h in ipairs(st.holders) do
    if h ~= skip then
      local _, ms = now()
      if h.deadline >= ms then
        c.live = c.live + 1
        if h.mode == 'x' then
          c.excl = c.excl + 1
        else
          c.shared = c.shared + 1
        end
        if not c.mindl or h.deadline < c.mindl then
          c.mindl = h.deadline
        end
        if h.deadline > c.maxdl then
          c.maxdl = h.deadline
        end
        if h.slot == 'o' then
          c.o_free = false
        end
      else
        c.dead[#c.dead + 1] = h.slot
      end
    end
  end
  return c
end

-- Removes the owner's queue entry, if any. LREM is O(queue length), but it
-- only runs for an owner that has an entry, i.e. once per cancelled waiter.
local function remove_waiter(owner)
  if redis.call('HDEL', waiters, owner) == 1 then
    redis.call('LREM', queue, 1, owner)
  end
end

-- peek_live_waiter returns the first waiter whose deadline has not passed,
-- and its record, without taking it from the queue; nil when nobody live
-- waits. Dead entries before it are dropped, each once: amortised O(1).
local function peek_live_waiter()
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if not head then
      return nil
    end
    local rec = redis.call('HGET', waiters, head)
    if rec then
      local _, ms = now()
      local w = parse_waiter(rec)
      if w.deadline >= ms then
        return head, w
      end
      redis.call('HDEL', waiters, head)
    end
    redis.call('LPOP', queue)
  end
end

-- pop_live_waiter is peek_live_waiter for a waiter that will be granted
-- whatever its mode (nothing is ahead of it): popping at once saves the
-- LINDEX.
local function pop_live_waiter()
  while true do
    local head = redis.call('LPOP', queue)
    if not head then
      return nil
    end
    local rec = redis.call('HGET', waiters, head)
    redis.call('HDEL', waiters, head)
    if rec then
      local _, ms = now()
      local w = parse_waiter(rec)
      if w.deadline >= ms then
        return head, w
      end
    end
  end
end

-- A batch collects one script's writes to the holders hash, so that any
-- number of grants cost one HSET, one PEXPIRE and one SET of the fence,
-- plus one PUBLISH per granted waiter. c is tally's count of the live
-- holders; the batch's counts grow with each grant.
local function new_batch(st, c)
  local b = {st = st, shared = c.shared, excl = c.excl, live = c.live,
    maxdl = c.maxdl, mindl = c.mindl, o_free = c.o_free, last = st.last,
    hset = {}, removed = {}, pubs = {}, granted = 0}
  for _, slot in ipairs(c.dead) do
    b.removed[slot] = true
  end
  -- A hash that exists with nobody live in it is what holders that died
  -- left: it is replaced whole (its kind label may be another's).
  b.fresh = st.exists and c.live == 0
  return b
end

-- grant makes owner a holder with a fresh fencing token and returns it (as a
-- string). The token is max(latest token + 1, server clock in µs): above
-- every earlier grant's while the server keeps its data (the latest is the
-- hash's 't', or the fence when the hash is gone), however its clock steps,
-- and increasing by the clock alone after a restart that lost every key.
local function grant(b, owner, ttl, mode, meta)
  local us, ms = now()
  if b.last == nil then
    b.last = redis.call('GET', fence)
  end
  local previous = tonumber(b.last or '0')
  local token = now_us_s
  if previous >= us then
    token = fmt(previous + 1)
  end
  b.last = token
  local dl = ms + tonumber(ttl)
  if dl > b.maxdl then
    b.maxdl = dl
  end
  if not b.mindl or dl < b.mindl then
    b.mindl = dl
  end
  local slot = owner
  if b.o_free then
    slot, b.o_free = 'o', false
    b.removed['o'] = nil
  end
  local h = b.hset
  h[#h + 1] = slot
  h[#h + 1] = owner .. '|' .. fmt(dl) .. '|' .. token .. '|' .. mode .. '|' .. now_ms_s .. '|' .. meta
  if mode == 'x' then
    b.excl = b.excl + 1
  else
    b.shared = b.shared + 1
  end
  b.live = b.live + 1
  b.granted = b.granted + 1
  return token
end

-- serve grants, in queue order, every waiter at the head of the queue that
-- the rule admits, and tells each on its client's channel ("owner:token",
-- at flush): exactly the waiters granted are woken. caller is the owner of
-- the script's request, who gets its token back instead of a notice (nil
-- for a release). head, w: the live head already read, if any.
-- Returns the caller's token if it was granted, and why serving stopped:
-- 'full' (nobody more can be admitted; the queue was not read), 'empty'
-- (nobody live waits), 'blocked' (the head, returned third, is not
-- admitted, and so nobody behind it is: every entry behind it has it ahead).
local function serve(b, limit, caller, head, w)
  local mine
  while true do
    if full(limit, b.shared, b.excl) then
      return mine, 'full'
    end
    if not head then
      if b.shared == 0 and b.excl == 0 then
        head, w = pop_live_waiter()
        if not head then
          return mine, 'empty'
        end
      else
        head, w = peek_live_waiter()
        if not head then
          return mine, 'empty'
        end
        if not admits(limit, w.mode, b.shared, b.excl) then
          return mine, 'blocked', head
        end
        redis.call('LPOP', queue)
        redis.call('HDEL', waiters, head)
      end
    elseif admits(limit, w.mode, b.shared, b.excl) then
      redis.call('LPOP', queue)
      redis.call('HDEL', waiters, head)
    else
      return mine, 'blocked', head
    end
    local token = grant(b, head, w.ttl, w.mode, w.meta)
    if head == caller then
      mine = token
    else
      b.pubs[#b.pubs + 1] = w.channel
      b.pubs[#b.pubs + 1] = head .. ':' .. token
    end
    head, w = nil, nil
  end
end

-- flush writes the batch: the holders removed (released, or dead), the
-- grants with the latest token and, for a new hash, the kind label; the
-- hash's expiry, the latest deadline of its live holders; the fence; the
-- notices. label is the key's kind label; prev the releasing owner, if any.
local function flush(b, label, prev)
  if b.fresh then
    redis.call('DEL', lock)
  else
    local dels = {}
    for slot in pairs(b.removed) do
      dels[#dels + 1] = slot
    end
    if #dels > 0 then
      redis.call('HDEL', lock, unpack(dels))
    end
  end
  local h = b.hset
  if prev then
    h[#h + 1] = 'p'
    h[#h + 1] = prev
  end
  if b.granted > 0 then
    h[#h + 1] = 't'
    h[#h + 1] = b.last
    if (b.fresh or not b.st.exists) and label ~= 'lock' then
      h[#h + 1] = 'k'
      h[#h + 1] = label
    end
  end
  if #h > 0 then
    redis.call('HSET', lock, unpack(h))
  end
  if b.granted > 0 then
    redis.call('PEXPIRE', lock, b.maxdl - now_ms) -- grant read the clock
    -- The token outlives the hash, which goes with the last release or
    -- its expiry (holders that crashed): the fence keeps it for the next
    -- grant, since the clock may step back behind it at any time. No
    -- expiry: an integer string, a few dozen bytes per key ever locked.
    redis.call('SET', fence, b.last)
    for i = 1, #b.pubs, 2 do
      redis.call('PUBLISH', b.pubs[i], b.pubs[i + 1])
    end
  end
end

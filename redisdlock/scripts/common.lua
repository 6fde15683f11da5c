-- common.lua is prepended to every dlock script. All keys of one lock share a
-- Redis Cluster hash slot through the hash tag {<escaped key>}:
--   KEYS[1] lock    hash: owner, token, meta, since (ms), prev (the owner
--                   before a hand-off). PEXPIRE = lease TTL.
--   KEYS[2] queue   list of waiting owner ids, arrival order.
--   KEYS[3] waiters hash: owner id -> "deadline_ms|ttl_ms|since_ms|channel|meta"
--   KEYS[4] fence   string: the token of the lock's latest grant, written
--                   by every grant and kept for good (no expiry): the next
--                   token is above it whatever the server's clock does, and
--                   a release resent after a lost reply finds in it whether
--                   anybody was granted the lock since (release.lua).
-- renew.lua is sent KEYS[1] only: it touches nothing else.
-- The queue and the waiters hash always hold the same owner ids: every script
-- adds or removes an id in both, and both get the same expiry.
-- Times come from the server's clock (TIME), never from a client's. Every
-- redis.call is server time on the path of a grant, so the scripts read each
-- thing once (HMGET) and only what the path taken needs.
local lock, queue, waiters, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- now returns the server time in µs and ms, reading it on first use only:
-- renew and the retried-request paths never need it. It also keeps both as
-- strings, cut from TIME's reply ({seconds, microseconds}): formatting a
-- number in Lua costs more than the commands around it.
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

-- parse_waiter splits a waiter record. Only the deadline becomes a number:
-- the rest goes back into commands as the strings they are.
local function parse_waiter(rec)
  local deadline, ttl, since, channel, meta = string.match(rec, '^(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
  return tonumber(deadline), ttl, since, channel, meta
end

-- Removes the owner's queue entry, if any. LREM is O(queue length), but it
-- only runs for an owner that has an entry, i.e. once per cancelled waiter.
local function remove_waiter(owner)
  if redis.call('HDEL', waiters, owner) == 1 then
    redis.call('LREM', queue, 1, owner)
  end
end

-- pop_live_waiter removes the first waiter whose deadline has not passed
-- from the queue and returns its id, ttl, channel and metadata, dropping
-- dead ones before it; nil when nobody live waits. Every caller serves the
-- waiter it gets (grants it the lock), so popping at once saves a LINDEX.
-- Every dead entry is dropped once, so the cost is amortised O(1).
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
      local deadline, ttl, _, channel, meta = parse_waiter(rec)
      if deadline >= ms then
        return head, ttl, channel, meta
      end
    end
  end
end

-- grant makes owner the holder with a fresh fencing token and returns it (as
-- a string). last is the previous token: the lock hash's on a hand-off, the
-- fence's (or nil) when the lock was free. The token is max(last + 1, server
-- clock in µs): above the previous one while the server keeps its data,
-- however its clock steps, and increasing by the clock alone after a
-- restart that lost every key. HSET overwrites every field, so no DEL is
-- needed first.
local function grant(owner, ttl, meta, prev, last)
  local us = now()
  local previous = tonumber(last or '0')
  local token = now_us_s
  if previous >= us then
    token = fmt(previous + 1)
  end
  redis.call('HSET', lock, 'owner', owner, 'token', token, 'meta', meta,
    'since', now_ms_s, 'prev', prev)
  redis.call('PEXPIRE', lock, ttl)
  -- The token outlives the hash, which goes with a release or its expiry
  -- (a holder that crashed): the fence keeps it for the next grant, since
  -- the clock may step back behind it at any time. No expiry: an integer
  -- string, a few dozen bytes per key ever locked (docs/redis.md).
  redis.call('SET', fence, token)
  return token
end

-- serve grants the lock to a waiter popped by pop_live_waiter and tells it
-- on its client's channel ("owner:token"): exactly one waiter is woken.
-- Returns the new token.
local function serve(head, ttl, channel, meta, prev, last)
  local token = grant(head, ttl, meta, prev, last)
  redis.call('PUBLISH', channel, head .. ':' .. token)
  return token
end

-- hand_off grants the lock to the first live waiter (serve). last is the
-- token in the lock hash. Returns the new holder, or nil when nobody waits.
local function hand_off(prev, last)
  local head, ttl, channel, meta = pop_live_waiter()
  if head then
    serve(head, ttl, channel, meta, prev, last)
  end
  return head
end

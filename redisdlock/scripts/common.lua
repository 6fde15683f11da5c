-- common.lua is prepended to every dlock script. All keys of one lock share a
-- Redis Cluster hash slot through the hash tag {<escaped key>}:
--   KEYS[1] lock    hash: owner, token, meta, since (ms), ttl (ms), prev
--                   (the owner before a hand-off). PEXPIRE = lease TTL.
--   KEYS[2] queue   list of waiting owner ids, arrival order.
--   KEYS[3] waiters hash: owner id -> "deadline_ms|ttl_ms|since_ms|channel|meta"
--   KEYS[4] fence   string: the last token, kept only in the rare case that
--                   the server clock alone could not keep tokens increasing.
-- Times come from the server's clock (TIME), never from a client's.
local lock, queue, waiters, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)

local function fmt(n)
  return string.format('%.0f', n)
end

local function parse_waiter(rec)
  local deadline, ttl, since, channel, meta = string.match(rec, '^(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
  return tonumber(deadline), tonumber(ttl), tonumber(since), channel, meta
end

-- Removes the owner's queue entry, if any. LREM is O(queue length), but it
-- only runs for an owner that has an entry, i.e. once per cancelled waiter.
local function remove_waiter(owner)
  if redis.call('HDEL', waiters, owner) == 1 then
    redis.call('LREM', queue, 1, owner)
  end
end

-- first_live_waiter returns the id and record of the first waiter whose
-- deadline has not passed, dropping dead ones from the head of the queue.
-- Every dead entry is dropped once, so the cost is amortised O(1).
local function first_live_waiter()
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if not head then
      return nil
    end
    local rec = redis.call('HGET', waiters, head)
    if rec and parse_waiter(rec) >= now_ms then
      return head, rec
    end
    redis.call('LPOP', queue)
    redis.call('HDEL', waiters, head)
  end
end

-- grant makes owner the holder with a fresh fencing token and returns it.
-- The token is above the previous holder's (still in the lock hash on a
-- hand-off), above the fence (if any), and at least the server clock in
-- microseconds, so that it keeps increasing even after the server lost all
-- data in a restart without persistence.
local function grant(owner, ttl, meta, prev)
  local last = tonumber(redis.call('HGET', lock, 'token') or '0')
  local f = tonumber(redis.call('GET', fence) or '0')
  if f > last then
    last = f
  end
  local token = math.max(last + 1, now_us)
  redis.call('DEL', lock, fence)
  redis.call('HSET', lock, 'owner', owner, 'token', fmt(token), 'meta', meta,
    'since', fmt(now_ms), 'ttl', fmt(ttl), 'prev', prev)
  redis.call('PEXPIRE', lock, ttl)
  return token
end

-- hand_off grants the lock to the first live waiter and tells it on its
-- client's channel ("owner:token"): exactly one waiter is woken. Returns the
-- new holder, or nil when nobody waits.
local function hand_off(prev)
  local head, rec = first_live_waiter()
  if not head then
    return nil
  end
  redis.call('LPOP', queue)
  redis.call('HDEL', waiters, head)
  local _, ttl, _, channel, meta = parse_waiter(rec)
  local token = grant(head, ttl, meta, prev)
  redis.call('PUBLISH', channel, head .. ':' .. fmt(token))
  return head
end

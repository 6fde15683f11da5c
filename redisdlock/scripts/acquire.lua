-- acquire.lua: take the key, or join (or stay in) its queue. The same call
-- serves the first attempt, a retry after a lost reply, and a waiter's
-- periodic poll, which also keeps its queue entry alive.
-- KEYS are common.lua's but the release trace, which acquiring never
-- touches (five: each key sent costs a Lua string at every run).
-- ARGV[1] owner id, ARGV[2] ttl ms ("ttl+delay" with a lock-delay, as in
-- the holder's record: common.lua), ARGV[3] metadata, ARGV[4] kind label
-- (which says the limit: label_limit), ARGV[5] mode ('x' or 's'), ARGV[6]
-- waiter timeout ms, "0" not to wait, ARGV[7] notification channel.
-- (Seven arguments: Redis builds ARGV as a table that grows by doubling,
-- and a ninth would cost a copy into 16 slots at every run.)
-- Returns {1, token, now} granted (now: the server's TIME in µs, for the
-- client's watch on the server's clock), or the token alone when it is now
-- (a string: no Lua table to build and convert); {0, pttl} not granted (not
-- waiting); {2, pttl, head, token} queued (head = 1 when first in line, and
-- pttl -1 unless head: only the first in line uses it; token is the latest
-- grant's, the hash's 't': a notice with a token up to it announces a
-- grant made before this call, which the caller has lost since);
-- {3, label} the key is another kind (nothing was written).
-- pttl is the time left to the earliest deadline among the holders: every
-- holder blocks the first waiter (an exclusive one is alone; a shared first
-- waiter is blocked by the limit, which every holder counts towards; an
-- exclusive one by every holder), so that is when it may be admitted.
local owner, ttl, meta = ARGV[1], ARGV[2], ARGV[3]
local label, mode = ARGV[4], ARGV[5]
local limit = label_limit(label)
local waiter_timeout, channel = tonumber(ARGV[6]), ARGV[7]
local wait = waiter_timeout > 0

read_state(owner)
if S.mine then
  local _, ms = now()
  local rec = S.recs[S.mine]
  local _, _, granted_until = holder_deadline(rec)
  if granted_until >= ms then
    -- Ours already: a retried request whose first reply was lost, or a
    -- waiter that missed its notice. Extend from now, which is later than
    -- when this request was sent, so the caller's deadline stays safe.
    local o, rest = string.match(rec, '^([^|]+)|%d+|[^|]+|(.*)$')
    redis.call('HSET', lock, S.slots[S.mine], o .. '|' .. now_ms_s .. '|' .. ttl .. '|' .. rest)
    local t, delay = split_ttl(ttl)
    if redis.call('PTTL', lock) < t + delay then
      redis.call('PEXPIRE', lock, fmt(t + delay))
    end
    return {1, string.match(rec, '^[^|]+|%d+|[^|]+|(%d+)|'), now_us_s}
  end
  -- Ours, but expired: as good as gone (tally drops it).
  S.mine = nil
end

-- The key's kind: its live holders' or, when none lives, its live waiters'.
-- Read without writing anything, so that a mismatch leaves the key as it
-- was, dead entries included.
tally()
local stored, head, wttl, wmode, wchannel, wmeta
local qempty = false
if S.live > 0 then
  stored = S.label_s or 'lock'
else
  local i = 0
  while true do
    local id = redis.call('LINDEX', queue, i)
    if not id then
      qempty = i == 0
      break
    end
    local rec = redis.call('HGET', waiters, id)
    if rec then
      local _, ms = now()
      local deadline, t, _, m, l, ch, me = parse_waiter(rec)
      if deadline >= ms then
        stored = l
        if i == 0 then
          head, wttl, wmode, wchannel, wmeta = id, t, m, ch, me
        end
        break
      end
    end
    i = i + 1
  end
end
if stored and stored ~= label then
  return {3, stored}
end

-- Serve the queue first, in order: whoever the rule admits now (the holders
-- ahead of them died without releasing, so nobody has granted them yet).
local token, why, bhead
if qempty then
  why = 'empty'
else
  token, why, bhead = serve(limit, owner, head, wttl, wmode, wchannel, wmeta)
end
if not token and why == 'empty' and S.excl == 0 and
    ((mode == 'x' and S.shared == 0) or (mode ~= 'x' and (limit == 0 or S.shared < limit))) then
  -- Nobody waits, and the holders admit the caller: at the tail of the
  -- queue, it would be granted at once.
  token = grant(owner, ttl, mode, meta)
end
if token then
  flush(label)
  if token == now_us_s then
    return token
  end
  return {1, token, now_us_s}
end
if S.granted > 0 then
  flush(label)
end

local _, ms = now()
local pttl = -1
if S.mindl then
  pttl = S.mindl - ms
end
if not wait then
  return {0, pttl}
end
local deadline = fmt(ms + waiter_timeout)
local rest = '|' .. mode .. '|' .. label .. '|' .. channel .. '|' .. meta
-- Joining is once per grant, a poll once per PollInterval: try the join's
-- write first, which also tells whether the caller is queued already.
local first = 0
local new_queue = false
if redis.call('HSETNX', waiters, owner, deadline .. '|' .. ttl .. '|' .. now_ms_s .. rest) == 1 then
  -- Last in line, and so first only in an empty queue: a new one, whose
  -- waiters hash is new too (it holds the same ids), both without expiry.
  if redis.call('RPUSH', queue, owner) == 1 then
    first, new_queue = 1, true
  end
  if not S.q then
    -- The release must read the queue from now on (common.lua, 'q'). The
    -- hash exists: somebody live holds the key, or was granted it by this
    -- run (which wrote 'q').
    redis.call('HSET', lock, 'q', '1')
  end
else
  -- A poll (or a join resent after a lost reply): keep the place in line
  -- and the time of joining, refresh the deadline.
  local _, _, since = parse_waiter(redis.call('HGET', waiters, owner))
  redis.call('HSET', waiters, owner, deadline .. '|' .. ttl .. '|' .. (since or now_ms_s) .. rest)
  if bhead then
    -- serve stopped at the first waiter: we know who it is.
    if bhead == owner then
      first = 1
    end
  elseif redis.call('LINDEX', queue, 0) == owner then
    first = 1
  end
end
-- The queue vanishes by itself once every waiter has stopped polling. It is
-- given twice the waiter timeout and extended only when less than one is
-- left, so that most calls need no PEXPIRE; and only ever extended, since
-- waiters may use different timeouts. Both keys always get the same expiry.
if new_queue or redis.call('PTTL', queue) < waiter_timeout then
  redis.call('PEXPIRE', queue, 2 * waiter_timeout)
  redis.call('PEXPIRE', waiters, 2 * waiter_timeout)
end
if first == 0 then
  pttl = -1
end
return {2, pttl, first, S.last or '0'}

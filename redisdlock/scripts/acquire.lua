-- acquire.lua: take the lock, or join (or stay in) its queue. The same call
-- serves the first attempt, a retry after a lost reply, and a waiter's
-- periodic poll, which also keeps its queue entry alive.
-- ARGV[1] owner id, ARGV[2] ttl ms, ARGV[3] metadata, ARGV[4] "1" to wait,
-- ARGV[5] waiter timeout ms, ARGV[6] notification channel.
-- Returns {1, token, now} granted (now: the server's TIME in µs, for the
-- client's watch on the server's clock); {0, pttl} held by another (not waiting);
-- {2, pttl, head, token} queued (head = 1 when first in line, and pttl -1
-- unless head: only the first in line uses it; token is the current
-- holder's: a hand-off notice with a token up to it announces a grant the
-- caller has already lost).
local owner, ttl, meta = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local wait, waiter_timeout, channel = ARGV[4] == '1', tonumber(ARGV[5]), ARGV[6]

local h = redis.call('HMGET', lock, 'owner', 'token')
local holder, token = h[1], h[2]
if holder == owner then
  -- Ours already: a retried request whose first reply was lost, or a waiter
  -- that missed its hand-off notice. Extend from now, which is later than
  -- when this request was sent, so the caller's deadline stays safe.
  redis.call('PEXPIRE', lock, ttl)
  now()
  return {1, token, now_us_s}
end

if not holder then
  -- Free. The previous token is in the fence (a free lock has no hash),
  -- unless the key was never locked or the server lost its data.
  token = redis.call('GET', fence)
  -- A fair lock serves its queue first.
  local head, wttl, wchannel, wmeta = pop_live_waiter()
  if head == nil or head == owner then
    local granted = grant(owner, ARGV[2], meta, '', token)
    return {1, granted, now_us_s}
  end
  -- The holder expired without releasing (it crashed), so nobody has woken
  -- the first waiter yet: hand the lock to it now (it is popped already).
  token = serve(head, wttl, wchannel, wmeta, '', token)
end

if not wait then
  return {0, redis.call('PTTL', lock)}
end
local _, ms = now()
local deadline, rest = fmt(ms + waiter_timeout), '|' .. channel .. '|' .. meta
-- Joining is once per grant, a poll once per PollInterval: try the join's
-- write first, which also tells whether the caller is queued already.
local head = 0
if redis.call('HSETNX', waiters, owner, deadline .. '|' .. ARGV[2] .. '|' .. now_ms_s .. rest) == 1 then
  -- Last in line, and so first only in an empty queue.
  if redis.call('RPUSH', queue, owner) == 1 then
    head = 1
  end
else
  -- A poll (or a join resent after a lost reply): keep the place in line
  -- and the time of joining, refresh the deadline.
  local _, _, since = parse_waiter(redis.call('HGET', waiters, owner))
  redis.call('HSET', waiters, owner, deadline .. '|' .. ARGV[2] .. '|' .. since .. rest)
  if redis.call('LINDEX', queue, 0) == owner then
    head = 1
  end
end
-- The queue vanishes by itself once every waiter has stopped polling. It is
-- given twice the waiter timeout and extended only when less than one is
-- left, so that most calls need no PEXPIRE; and only ever extended, since
-- waiters may use different timeouts. Both keys always get the same expiry.
if redis.call('PTTL', queue) < waiter_timeout then
  redis.call('PEXPIRE', queue, 2 * waiter_timeout)
  redis.call('PEXPIRE', waiters, 2 * waiter_timeout)
end
local pttl = -1
if head == 1 then
  pttl = redis.call('PTTL', lock)
end
return {2, pttl, head, token or '0'}

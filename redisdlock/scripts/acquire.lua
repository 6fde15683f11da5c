-- acquire.lua: take the lock, or join (or stay in) its queue. The same call
-- serves the first attempt, a retry after a lost reply, and a waiter's
-- periodic poll, which also keeps its queue entry alive.
-- ARGV[1] owner id, ARGV[2] ttl ms, ARGV[3] metadata, ARGV[4] "1" to wait,
-- ARGV[5] waiter timeout ms, ARGV[6] notification channel.
-- Returns {1, token} granted; {0, pttl} held by another (not waiting);
-- {2, pttl, head, token} queued (head = 1 when first in line; token is the
-- current holder's: a hand-off notice with a token up to it announces a
-- grant the caller has already lost).
local owner, ttl, meta = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local wait, waiter_timeout, channel = ARGV[4] == '1', tonumber(ARGV[5]), ARGV[6]

local holder = redis.call('HGET', lock, 'owner')
if holder == owner then
  -- Ours already: a retried request whose first reply was lost, or a waiter
  -- that missed its hand-off notice. Extend from now, which is later than
  -- when this request was sent, so the caller's deadline stays safe.
  redis.call('PEXPIRE', lock, ttl)
  return {1, redis.call('HGET', lock, 'token')}
end

if not holder then
  -- Free. A fair lock serves its queue first.
  local head = first_live_waiter()
  if head == nil or head == owner then
    remove_waiter(owner)
    return {1, fmt(grant(owner, ttl, meta, ''))}
  end
  -- The holder expired without releasing (it crashed), so nobody has woken
  -- the first waiter yet: hand the lock to it now.
  hand_off('')
end

local pttl = redis.call('PTTL', lock)
if not wait then
  return {0, pttl}
end
local rec = redis.call('HGET', waiters, owner)
local since = now_ms
if rec then
  local _, _, s = parse_waiter(rec)
  since = s
else
  redis.call('RPUSH', queue, owner)
end
redis.call('HSET', waiters, owner, table.concat({fmt(now_ms + waiter_timeout), fmt(ttl), fmt(since), channel, meta}, '|'))
-- The queue vanishes by itself once every waiter has stopped polling. Only
-- ever extend it: waiters may use different timeouts.
if redis.call('PTTL', queue) < waiter_timeout or redis.call('PTTL', waiters) < waiter_timeout then
  redis.call('PEXPIRE', queue, waiter_timeout)
  redis.call('PEXPIRE', waiters, waiter_timeout)
end
local head = 0
if redis.call('LINDEX', queue, 0) == owner then
  head = 1
end
return {2, pttl, head, redis.call('HGET', lock, 'token') or '0'}

-- renew.lua: extend leases of one client, one or many at once (Grant.Renew
-- sends one, driver.BatchRenewer's RenewBatch up to renewBatchMax). KEYS[i]
-- the lock hash of the i-th lease (only that key of each lock; all in one
-- Cluster slot); ARGV[1] ttl ms, the same for all; ARGV[1 + i] the i-th
-- lease's owner id.
-- Returns {s, us, r1, ..., rn}, where s, us is the server's TIME (the
-- client compares it with its own clock to tell when the server's clock has
-- jumped ahead: grant.go) and ri is 1 when the i-th lease was extended, 0
-- when its owner no longer holds its key. Each lease is judged on its own:
-- one gone changes nothing for the others.
-- It runs alone, without common.lua, which it would pay for at every run.
-- The holder's record is "owner|renewed_ms|ttl_ms|token|mode|since_ms|meta"
-- (common.lua); renewing sets renewed to now and ttl to the new one.
local ttl_s = ARGV[1]
local ttl = tonumber(ttl_s)
local t = redis.call('TIME')
local now_ms_s = t[1] .. string.sub(string.sub('00000' .. t[2], -6), 1, 3)
local ms = tonumber(now_ms_s)
local out = {t[1], t[2]}
for i = 1, #KEYS do
  local lock, owner = KEYS[i], ARGV[i + 1]
  out[i + 2] = 0
  -- The owner's record is in its own field, or in 'o' (common.lua).
  local r = redis.call('HMGET', lock, owner, 'o', 'k')
  local slot, rec = owner, r[1]
  if not rec and r[2] and string.sub(r[2], 1, #owner + 1) == owner .. '|' then
    slot, rec = 'o', r[2]
  end
  local o, renewed, old_ttl, delay, rest
  if rec then
    -- delay is "+delay_ms" for a holder with a lock-delay, else empty.
    o, renewed, old_ttl, delay, rest = string.match(rec, '^([^|]+)|(%d+)|(%d+)([^|]*)|(.*)$')
  end
  -- A record whose deadline has passed is gone, as an expired key would be:
  -- others may have been granted its place.
  if renewed and tonumber(renewed) + tonumber(old_ttl) >= ms then
    redis.call('HSET', lock, slot, o .. '|' .. now_ms_s .. '|' .. ttl_s .. delay .. '|' .. rest)
    -- The hash lives until the latest deadline of its holders (plus its
    -- lock-delay): extend it only if ours is now the latest (another
    -- holder may have a longer TTL).
    local live = ttl
    if delay ~= '' then
      live = ttl + tonumber(string.sub(delay, 2))
    end
    if redis.call('PTTL', lock) < live then
      redis.call('PEXPIRE', lock, live)
    end
    -- An election's leader tells its observers how long it now lives, so
    -- that they need not read to learn it (watch.go): "r<ttl ms>" on the
    -- channel of common.lua's notices. Other kinds publish nothing.
    if r[3] == 'election' then
      redis.call('PUBLISH', lock .. ':n', 'r' .. ttl_s)
    end
    out[i + 2] = 1
  end
end
return out

-- revoke.lua: end the grants of one key on an operator's request
-- (driver.Revoker), and grant every waiter the rule then admits.
-- ARGV[1] the fencing token of the holder to revoke, '0' for every holder.
-- Returns {1, now_ms, n, holder_1..holder_n}, the revoked holders as
-- inspect.lua shows them (token, mode, meta, since, deadline, delay,
-- ended: 7 items), or {0} when ARGV[1] names no holder (nothing changed).
--
-- A revoked holder's record leaves its field, so that its owner's next
-- renewal (renew.lua) and release (release.lua) find it gone; with a
-- lock-delay it stays as '!' .. owner, a holder of its mode until the
-- delay, counted from now, has passed (common.lua). The slot's record is
-- raised above the revoked tokens: the next grant's token is above them,
-- and a release resent by a revoked owner cannot take an equal record for
-- proof of its own release (release.lua). A retry after a lost reply
-- revokes nothing more than meant: a holder revoked with a lock-delay is
-- returned again by its token; without one, its token is gone (ErrNotHeld).
local want = ARGV[1]
local _, ms = now()
read_state('|') -- nobody's: no owner id contains '|'
local out = {1, now_ms_s, 0}
local top = 0
local del, set = {}, {}
for i = 1, S.nrec do
  local f, rec = S.slots[i], S.recs[i]
  local owner, renewed, ttl, delay, token, mode, since, meta =
    string.match(rec, '^([^|]+)|(%d+)|(%d+)%+?(%d*)|(%d+)|(%a)|(%d*)|(.*)$')
  if renewed and (want == '0' or token == want) then
    local dl = tonumber(renewed) + tonumber(ttl)
    local ghost = string.byte(f) == 33
    -- A live grant; or, asked for by its token, one revoked already.
    if (not ghost and dl >= ms) or (ghost and want ~= '0' and dl + tonumber(delay) >= ms) then
      local shown_since = since
      if since == '' then
        shown_since = string.sub(token, 1, -4)
      end
      if f == 'o' then
        meta = S.meta_o or ''
      end
      local ended, until_ms = '0', dl
      if ghost then
        ended, until_ms = '1', dl + tonumber(delay)
      end
      for _, v in ipairs({token, mode, meta, shown_since, fmt(until_ms), delay, ended}) do
        out[#out + 1] = v
      end
      out[3] = out[3] + 1
      if not ghost then
        del[#del + 1] = f
        if f == 'o' then
          del[#del + 1] = 'm'
        end
        if delay ~= '' and delay ~= '0' then
          set[#set + 1] = '!' .. owner
          set[#set + 1] = '!' .. owner .. '|' .. now_ms_s .. '|0+' .. delay .. '|' .. token .. '|' .. mode .. '|' .. since .. '|' .. meta
        end
        if tonumber(token) > top then
          top = tonumber(token)
        end
      end
    end
  end
end
if out[3] == 0 then
  if want ~= '0' then
    return {0}
  end
  return out
end
if top == 0 then
  return out -- a retry: nothing more to change
end
redis.call('HDEL', lock, unpack(del))
if #set > 0 then
  redis.call('HSET', lock, unpack(set))
  -- The hash must outlive the delays: revoked + delay is at most
  -- MaxLockDelay from now.
  local max_delay = 0
  for i = 2, #set, 2 do
    local d = tonumber(string.match(set[i], '^[^|]+|%d+|0%+(%d+)|'))
    if d > max_delay then
      max_delay = d
    end
  end
  if redis.call('PTTL', lock) < max_delay then
    redis.call('PEXPIRE', lock, max_delay)
  end
end
local r = tonumber(redis.call('GET', record) or '0')
if top > r then
  r = top
end
redis.call('SET', record, fmt(r + 1))

-- Serve the queue as a release would, on the hash as it is now.
S.exists, S.label_s, S.last, S.prev, S.slots, S.recs, S.nrec = false, false, false, false, false, false, 0
S.q, S.meta_o = false, false
read_state('|')
local label = S.label_s or 'lock'
if not S.exists then
  return out
end
tally()
if S.last and tonumber(S.last) <= r then
  -- Grants below take tokens above the raised record.
  S.last = fmt(r + 1)
end
serve(label_limit(S.label_s), nil)
if S.live == 0 then
  -- Nobody holds, nobody waits: the slot's record keeps the tokens.
  redis.call('DEL', lock)
elseif S.granted > 0 then
  flush(label)
end
if label == 'election' then
  notify_observers()
end
return out

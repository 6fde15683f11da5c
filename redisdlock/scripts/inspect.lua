-- inspect.lua: a consistent snapshot of one key.
-- Returns {now_ms, label, n, holder_1..holder_n, waiter_1, ...}: label the
-- kind label ('' when nobody holds or waits, or for a lock), n the
-- holders, each as token, mode, meta, since, deadline, delay, ended (in no
-- particular order: the client sorts them by token, which is grant order);
-- delay is the lock-delay in ms ('' for none), ended '1' for a holder whose
-- grant ended (expired or revoked) while its lock-delay keeps its place,
-- its deadline then the delay's end; the live waiters in order, each as
-- mode, meta, since, deadline.
local _, ms = now()
read_state('-') -- nobody's
local out = {now_ms_s, '', 0}
local known = false
for i = 1, S.nrec do
  local renewed, ttl, delay, token, mode, since, meta =
    string.match(S.recs[i], '^[^|]+|(%d+)|(%d+)%+?(%d*)|(%d+)|(%a)|(%d*)|(.*)$')
  local dl = renewed and tonumber(renewed) + tonumber(ttl)
  local ended = '0'
  if dl and dl < ms and delay ~= '' then
    dl, ended = dl + tonumber(delay), '1'
  end
  if dl and string.byte(S.slots[i]) == 33 then
    ended = '1' -- '!': revoked (common.lua)
  end
  if dl and dl >= ms then
    if since == '' then
      since = string.sub(token, 1, -4) -- the token is the grant's µs
    end
    if S.slots[i] == 'o' then
      meta = S.meta_o or ''
    end
    table.insert(out, token)
    table.insert(out, mode)
    table.insert(out, meta)
    table.insert(out, since)
    table.insert(out, fmt(dl))
    table.insert(out, delay)
    table.insert(out, ended)
    out[3] = out[3] + 1
    known = true
  end
end
if known then
  out[2] = S.label_s or ''
end
for _, id in ipairs(redis.call('LRANGE', queue, 0, -1)) do
  local rec = redis.call('HGET', waiters, id)
  if rec then
    local deadline, _, since, mode, label, _, meta = parse_waiter(rec)
    if deadline >= ms then
      if not known then
        out[2], known = label, true
      end
      table.insert(out, mode)
      table.insert(out, meta)
      table.insert(out, since)
      table.insert(out, fmt(deadline))
    end
  end
end
return out

-- inspect.lua: a consistent snapshot of one key.
-- Returns {now_ms, label, n, holder_1..holder_n, waiter_1, ...}: label the
-- kind label ('' when nobody holds or waits, or for a lock), n the live
-- holders, each as token, mode, meta, since, deadline (in no particular
-- order: the client sorts them by token, which is grant order); the live
-- waiters in order, each as mode, meta, since, deadline.
local _, ms = now()
read_state('-') -- nobody's
local out = {now_ms_s, '', 0}
local known = false
for i = 1, S.nrec do
  local renewed, ttl, token, mode, since, meta =
    string.match(S.recs[i], '^[^|]+|(%d+)|(%d+)|(%d+)|(%a)|(%d*)|(.*)$')
  if renewed and tonumber(renewed) + tonumber(ttl) >= ms then
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
    table.insert(out, fmt(tonumber(renewed) + tonumber(ttl)))
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

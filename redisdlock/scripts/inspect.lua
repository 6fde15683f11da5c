-- inspect.lua: a consistent snapshot of one key.
-- Returns {now_ms, label, n, holder_1..holder_n, waiter_1, ...}: label the
-- kind label ('' when nobody holds or waits, or for a lock), n the live
-- holders, each as token, mode, meta, since, deadline (in no particular
-- order: the client sorts them by token, which is grant order); the live
-- waiters in order, each as mode, meta, since, deadline.
local _, ms = now()
local st = read_state()
local out = {now_ms_s, '', 0}
local live = false
for _, h in ipairs(st.holders) do
  if h.deadline >= ms then
    local since, meta = string.match(h.rec, '^%x+|%d+|%d+|%a|(%d+)|(.*)$')
    table.insert(out, h.token)
    table.insert(out, h.mode)
    table.insert(out, meta or '')
    table.insert(out, since or '0')
    table.insert(out, fmt(h.deadline))
    out[3] = out[3] + 1
    live = true
  end
end
if live then
  out[2] = st.label or ''
end
for _, id in ipairs(redis.call('LRANGE', queue, 0, -1)) do
  local rec = redis.call('HGET', waiters, id)
  if rec then
    local w = parse_waiter(rec)
    if w.deadline >= ms then
      if not live then
        out[2], live = w.label, true
      end
      table.insert(out, w.mode)
      table.insert(out, w.meta)
      table.insert(out, w.since)
      table.insert(out, fmt(w.deadline))
    end
  end
end
return out

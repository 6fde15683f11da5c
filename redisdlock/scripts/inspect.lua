-- inspect.lua: a consistent snapshot of one lock.
-- Returns {now_ms, token, meta, since, pttl, w1_meta, w1_since, w1_deadline, ...}
-- with token "" when nobody holds the lock; only live waiters, in order.
local _, ms = now()
local out = {now_ms_s}
local h = redis.call('HMGET', lock, 'token', 'meta', 'since')
if h[1] then
  table.insert(out, h[1])
  table.insert(out, h[2] or '')
  table.insert(out, h[3] or '0')
  table.insert(out, redis.call('PTTL', lock))
else
  table.insert(out, '')
  table.insert(out, '')
  table.insert(out, '0')
  table.insert(out, -2)
end
for _, id in ipairs(redis.call('LRANGE', queue, 0, -1)) do
  local rec = redis.call('HGET', waiters, id)
  if rec then
    local deadline, _, since, _, meta = parse_waiter(rec)
    if deadline >= ms then
      table.insert(out, meta)
      table.insert(out, since)
      table.insert(out, fmt(deadline))
    end
  end
end
return out

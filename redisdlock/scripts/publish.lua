-- publish.lua: replace the metadata of the owner's holder record (Proclaim),
-- only while the owner holds the key. KEYS[1] lock (the only key sent);
-- ARGV[1] owner id, ARGV[2] the new metadata.
-- Returns 1 when replaced (or already equal: a retry after a lost reply
-- finds its own write), 0 when the owner holds no live record: its grant
-- expired, was released, or passed to another owner. It never touches
-- another owner's record and never changes a deadline: the record is
-- "owner|renewed_ms|ttl_ms|token|mode|since_ms|meta" (common.lua) and only
-- meta is replaced, or 'm' for the holder in 'o'. On an election key it tells the key's observers
-- (PUBLISH on KEYS[1] .. ':n', as common.lua's flush does).
-- It runs alone, without common.lua, as renew.lua does.
local lock, owner = KEYS[1], ARGV[1]
local r = redis.call('HMGET', lock, owner, 'o', 'k', 'm')
-- The owner's record is in its own field, or in 'o' (common.lua).
local slot, rec = owner, r[1]
if not rec and r[2] and string.sub(r[2], 1, #owner + 1) == owner .. '|' then
  slot, rec = 'o', r[2]
end
if not rec then
  return 0
end
local head, renewed, ttl = string.match(rec, '^([^|]+|(%d+)|(%d+)[^|]*|%d+|%a|%d*)|')
if not head then
  return 0
end
-- A record past its deadline is gone, as an expired key would be (others
-- may have been granted its place since).
local t = redis.call('TIME')
local ms = tonumber(t[1] .. string.sub(string.sub('00000' .. t[2], -6), 1, 3))
if tonumber(renewed) + tonumber(ttl) < ms then
  return 0
end
if slot == 'o' then
  -- 'o''s metadata lives in 'm' (common.lua).
  if r[4] ~= ARGV[2] then
    redis.call('HSET', lock, 'm', ARGV[2])
  end
else
  local new = head .. '|' .. ARGV[2]
  if new ~= rec then
    redis.call('HSET', lock, slot, new)
  end
end
if r[3] == 'election' then
  redis.call('PUBLISH', lock .. ':n', 'p')
end
return 1

-- fence.lua: one write fenced by a token (fence.go). Compare the writer's
-- token with the highest one recorded for the fence, and only if it is not
-- older, record it and run the write: one script, so no other client's
-- command comes in between.
-- KEYS[1] the fence's record: a string, the highest token written through
--         the fence, in decimal; no expiry (nothing but a Fence writes it).
-- KEYS[2..] the write's keys, in the command's order.
-- ARGV[1] the token, in decimal without leading zeros (any uint64);
-- ARGV[2] "1" to refuse a missing record on a server that may evict it;
-- ARGV[3] the command; ARGV[4..] its arguments after the keys.
-- Returns {1, reply} written, with the command's reply; {0, recorded}
-- refused, the token being older than recorded; {2, policy} refused, the
-- record missing and the maxmemory-policy one that may evict it. A refusal
-- writes nothing.
-- It runs alone, without common.lua, which it needs nothing of.
local fence, token = KEYS[1], ARGV[1]

-- older tells whether decimal a is below decimal b, digit by digit: Lua's
-- numbers are doubles, exact only up to 2^53, and tokens from other stores
-- (or from redisdlock in some centuries) may be larger; string < would
-- follow the server's locale.
local function older(a, b)
  if #a ~= #b then
    return #a < #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return false
end

local recorded = redis.call('GET', fence)
if recorded then
  if not string.match(recorded, '^[1-9]%d*$') then
    return redis.error_reply('fence record ' .. fence .. ' holds ' .. string.sub(recorded, 1, 40) ..
      ', not a token: it was written by something other than a Fence')
  end
  if older(token, recorded) then
    return {0, recorded}
  end
elseif ARGV[2] == '1' then
  -- The record has no expiry, so only the allkeys-* policies can evict
  -- it; the check costs an INFO, paid only when the record is created (or
  -- has gone missing, which is what an eviction would look like). A server
  -- that denies INFO cannot tell, and is accepted as redisdlock.New does.
  local info = redis.pcall('INFO', 'memory')
  if type(info) == 'string' then
    local policy = string.match(info, 'maxmemory_policy:(%S+)')
    if policy and string.sub(policy, 1, 8) == 'allkeys-' then
      return {2, policy}
    end
  end
end

-- Record first, write second: a command that then fails (WRONGTYPE)
-- leaves the token recorded and the data as it was, which refuses older
-- writers a little early but never lets one through; the other order could
-- leave data written under a token the record does not know. (Scripts are
-- not rolled back; a write the OOM check would refuse is refused at the
-- first write, before either.)
if recorded ~= token then
  redis.call('SET', fence, token)
end
local args = {}
for i = 2, #KEYS do
  args[#args + 1] = KEYS[i]
end
for i = 4, #ARGV do
  args[#args + 1] = ARGV[i]
end
return {1, redis.call(ARGV[3], unpack(args))}

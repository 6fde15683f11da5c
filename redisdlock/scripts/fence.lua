-- fence.lua: one write fenced by a token (fence.go). Compare the writer's
-- token with the highest one recorded for the fence, and only if it is not
-- older, record it and run the write: one script, so no other client's
-- command comes in between. Every write carries an id of its own, and the
-- record keeps the ids of the last writes applied, so that a write sent
-- again after its reply was lost (go-redis' retry) is recognized and not
-- run twice.
-- KEYS[1] the fence's record: a string, "<token> <id> <id> …": the highest
--         token written through the fence, in decimal, then the ids of
--         the last writes applied (at most recentWrites), newest first; a
--         record of the token alone is one without ids. No expiry (nothing
--         but a Fence writes it).
-- KEYS[2..] the write's keys, in the command's order.
-- ARGV[1] the token, in decimal without leading zeros (any uint64);
-- ARGV[2] "1" to refuse a missing record on a server that may evict it;
-- ARGV[3] the write's id, hex digits: drawn at random for each Fence
--         call, the same in every retry of it;
-- ARGV[4] the command; ARGV[5..] its arguments after the keys.
-- Returns {1, reply} written, with the command's reply; {0, recorded}
-- refused, the token being older than recorded; {2, policy} refused, the
-- record missing and the maxmemory-policy one that may evict it; {3} the
-- write's id is recorded: it was applied already, and this is the same
-- write sent again. A refusal writes nothing, nor does {3}.
-- It runs alone, without common.lua, which it needs nothing of.
local fence, token, id = KEYS[1], ARGV[1], ARGV[3]

-- recentWrites bounds the ids kept: a retry is recognized if fewer than
-- this many other writes of the fence were applied between its first
-- attempt and itself (go-redis retries within a second: this covers the
-- writes of a newer holder that came in between, and a few concurrent
-- writers of one holder); after more it is judged anew, as a write
-- without an id would be. 8 ids of 32 digits keep a record under 300 bytes.
local recentWrites = 8

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

if not string.match(id, '^%x+$') then
  return redis.error_reply('fence write id ' .. string.sub(id, 1, 40) .. ' is not hex digits')
end

local recorded = redis.call('GET', fence)
local ids = {}
if recorded then
  local top, rest = string.match(recorded, '^([1-9]%d*)(.*)$')
  if not top or (string.gsub(rest, ' %x+', '')) ~= '' then
    return redis.error_reply('fence record ' .. fence .. ' holds ' .. string.sub(recorded, 1, 40) ..
      ', not a token: it was written by something other than a Fence')
  end
  for x in string.gmatch(rest, '%x+') do
    ids[#ids + 1] = x
  end
  -- The id before the token: a write applied, whose retry comes after a
  -- newer holder's write, landed before that write — it is answered
  -- "applied", not "stale". A write not applied has no id here and is
  -- judged on its token below.
  for i = 1, #ids do
    if ids[i] == id then
      return {3}
    end
  end
  if older(token, top) then
    return {0, top}
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

-- record returns the record of token, with first (if any) before the
-- recorded ids, keeping at most recentWrites.
local function record(first)
  local r = {token, first}
  for i = 1, #ids do
    if #r > recentWrites then
      break
    end
    r[#r + 1] = ids[i]
  end
  return table.concat(r, ' ')
end

-- Record first, write second: a command that then fails (WRONGTYPE)
-- leaves the token recorded and the data as it was, which refuses older
-- writers a little early but never lets one through; the other order could
-- leave data written under a token the record does not know. (Scripts are
-- not rolled back; a write the OOM check would refuse is refused at the
-- first write, before either.) The token is not older than the recorded
-- one, so it is the highest.
redis.call('SET', fence, record(id))
local args = {}
for i = 2, #KEYS do
  args[#args + 1] = KEYS[i]
end
for i = 5, #ARGV do
  args[#args + 1] = ARGV[i]
end
local reply = redis.pcall(ARGV[4], unpack(args))
if type(reply) == 'table' and reply.err then
  -- Not applied: the id goes (a retry is judged anew, and fails again or
  -- runs), the token stays.
  redis.call('SET', fence, record(nil))
  return reply
end
return {1, reply}

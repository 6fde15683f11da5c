-- acquire_join.lua: the fast path of acquire.lua for a request to wait for
-- a lock that somebody else holds live, run after acquire_free.lua and
-- ahead of common.lua (whose functions and state every join would otherwise
-- create). Same KEYS and ARGV as acquire.lua. With a live holder in 'o' and
-- no kind label, the key is a lock held by somebody, so the general path
-- would serve nobody (the holder blocks everyone), find the kind the same,
-- and join the caller or refresh its entry: this does the same, with the
-- same commands but HMGET for HGETALL, and the same reply. Anything else
-- (no holder, a dead one, the caller's own record, another kind, TryLock)
-- goes on to acquire.lua.
if ARGV[4] == 'lock' and ARGV[6] ~= '0' then
  local owner = ARGV[1]
  local h = redis.call('HMGET', KEYS[1], 'o', 'k', 't', 'q')
  if h[1] and not h[2] and string.sub(h[1], 1, #owner + 1) ~= owner .. '|' then
    local renewed, httl = string.match(h[1], '^[^|]+|(%d+)|(%d+)|')
    local t = redis.call('TIME')
    local frac = t[2]
    if #frac < 6 then
      frac = string.sub('00000' .. frac, -6)
    end
    local ms_s = t[1] .. string.sub(frac, 1, 3)
    local ms = tonumber(ms_s)
    local dl = renewed and tonumber(renewed) + tonumber(httl)
    if dl and dl >= ms then
      local wt = tonumber(ARGV[6])
      local deadline = string.format('%.0f', ms + wt)
      local rest = '|' .. ARGV[5] .. '|lock|' .. ARGV[7] .. '|' .. ARGV[3]
      local first, new_queue = 0, false
      if redis.call('HSETNX', KEYS[3], owner, deadline .. '|' .. ARGV[2] .. '|' .. ms_s .. rest) == 1 then
        if redis.call('RPUSH', KEYS[2], owner) == 1 then
          first, new_queue = 1, true
        end
        if not h[4] then
          redis.call('HSET', KEYS[1], 'q', '1') -- see common.lua, 'q'
        end
      else
        -- A poll: keep the place in line and the time of joining.
        local since = string.match(redis.call('HGET', KEYS[3], owner), '^%d+|[^|]+|(%d+)|')
        redis.call('HSET', KEYS[3], owner, deadline .. '|' .. ARGV[2] .. '|' .. (since or ms_s) .. rest)
        if redis.call('LINDEX', KEYS[2], 0) == owner then
          first = 1
        end
      end
      if new_queue or redis.call('PTTL', KEYS[2]) < wt then
        redis.call('PEXPIRE', KEYS[2], 2 * wt)
        redis.call('PEXPIRE', KEYS[3], 2 * wt)
      end
      if first == 1 then
        return {2, dl - ms, 1, h[3] or '0'}
      end
      return {2, -1, 0, h[3] or '0'}
    end
  end
end

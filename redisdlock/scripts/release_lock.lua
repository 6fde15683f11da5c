-- release_lock.lua: the fast path of release.lua for the holder of a lock,
-- run ahead of common.lua (whose functions and state a lock's release
-- would otherwise create at every run). Same KEYS and ARGV as release.lua.
-- A lock (no kind label 'k') has one holder, in 'o'; when that is the
-- caller's record, live or dead (see release.lua), the caller releases: the
-- first live waiter is granted in its place, or with nobody live waiting
-- the hash becomes the slot's trace. It runs the same commands and writes
-- the same as common.lua's serve and flush would for this case (HSET of the
-- new record, its metadata 'm', 'p' and 't' with no HDEL, since the record takes 'o'; the
-- hash's expiry; the slot's record, raised by GETSET and put back when it
-- was higher; the waiter's notice). Anything else (another kind, another
-- owner, no token in the hash) goes on to release.lua. Returns 1.
local held = redis.call('HMGET', KEYS[1], 'o', 'k', 't', 'q')
local owner = ARGV[1]
-- A holder with a lock-delay (a '+' in its record, whose metadata is in
-- 'm') goes on to release.lua, which tells whether its grant has ended.
if held[1] and not held[2] and held[3] and string.sub(held[1], 1, #owner + 1) == owner .. '|' and
    not string.find(held[1], '+', 1, true) then
  local us, us_s, ms, ms_s
  while true do
    -- Without 'q' nobody ever queued for this hash (common.lua): no LPOP.
    local id = held[4] and redis.call('LPOP', KEYS[2])
    if not id then
      -- Nobody waits: the trace of this release, for a resend (release.lua).
      redis.call('RENAME', KEYS[1], KEYS[6])
      return 1
    end
    local rec = redis.call('HGET', KEYS[3], id)
    redis.call('HDEL', KEYS[3], id)
    if rec then
      if not us then
        local t = redis.call('TIME')
        local frac = t[2]
        if #frac < 6 then
          frac = string.sub('00000' .. frac, -6)
        end
        us_s, ms_s = t[1] .. frac, t[1] .. string.sub(frac, 1, 3)
        -- ms by arithmetic, exact below 2^53: tonumber (strtod) costs more.
        us = tonumber(us_s)
        ms = math.floor(us / 1000)
      end
      local deadline, ttl, _, mode, _, channel, meta =
        string.match(rec, '^(%d+)|([^|]+)|(%d+)|(%a)|([^|]*)|([^|]*)|(.*)$')
      if deadline and tonumber(deadline) >= ms then
        local token, since = us_s, ''
        if tonumber(held[3]) >= us then
          token, since = string.format('%.0f', tonumber(held[3]) + 1), ms_s
        end
        redis.call('HSET', KEYS[1], 'o', id .. '|' .. ms_s .. '|' .. ttl .. '|' .. token .. '|' .. mode .. '|' .. since .. '|',
          'm', meta, 'p', owner, 't', token)
        local plus = string.find(ttl, '+', 1, true)
        if plus then
          -- A lock-delay: the hash outlives the deadline by it.
          redis.call('PEXPIRE', KEYS[1], string.format('%.0f', tonumber(string.sub(ttl, 1, plus - 1)) + tonumber(string.sub(ttl, plus + 1))))
        else
          redis.call('PEXPIRE', KEYS[1], ttl)
        end
        local was = redis.call('GETSET', KEYS[5], token)
        if was and tonumber(was) > (token == us_s and us or tonumber(token)) then
          redis.call('SET', KEYS[5], was)
        end
        redis.call('PUBLISH', channel, id .. ':' .. token)
        return 1
      end
    end
    -- A dead waiter (its deadline passed, or its entry is gone): dropped.
  end
end

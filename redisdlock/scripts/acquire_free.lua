-- acquire_free.lua: the fast path of acquire.lua for a free key, run ahead
-- of common.lua (which a free key would pay for at every run: its
-- functions are created anew each time). Same KEYS and ARGV as acquire.lua.
-- A key whose holders hash, queue and old fence are all absent is free and
-- nobody waits for it: whatever the request's kind and mode, the grant rule
-- admits it at once. The grant is what common.lua's grant and flush would
-- write: the first holder's record in 'o' and its metadata in 'm', the token in 't', the kind
-- label in 'k' (none for a lock), the hash's expiry, the slot's record, and
-- for an election the observers' notice. Its token is the server clock's µs,
-- or one above the slot's record when the record is not below the clock
-- (the clock stepped back, or grants came faster than once per µs): the
-- record is read and raised by one GETSET, and put right by a SET in that
-- rare case. Returns the token, or {1, token, now} when it is not
-- the clock's µs (see acquire.lua). Anything else (the key held, waited for,
-- or with an old fence) goes on to acquire.lua.
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[4]) == 0 then
  local t = redis.call('TIME')
  local frac = t[2]
  if #frac < 6 then
    frac = string.sub('00000' .. frac, -6)
  end
  local us_s = t[1] .. frac
  local ms_s = t[1] .. string.sub(frac, 1, 3)
  local token = us_s
  local was = redis.call('GETSET', KEYS[5], us_s)
  -- Both are decimal integers with no leading zero (every writer of the
  -- record writes TIME's digits or a %.0f), so the longer is the higher,
  -- and at equal length the order of their digits decides (Lua's strcoll:
  -- digits collate in order in every locale): cheaper than two tonumber
  -- (strtod).
  if was and (#was > #us_s or #was == #us_s and was >= us_s) then
    token = string.format('%.0f', tonumber(was) + 1)
    redis.call('SET', KEYS[5], token)
  end
  local ttl, label = ARGV[2], ARGV[4]
  -- since is left empty when it is the token's ms (common.lua, Records).
  local since = ''
  if token ~= us_s then
    since = ms_s
  end
  -- 'o''s metadata goes in 'm' (common.lua, Records).
  local rec = ARGV[1] .. '|' .. ms_s .. '|' .. ttl .. '|' .. token .. '|' .. ARGV[5] .. '|' .. since .. '|'
  if label == 'lock' then
    redis.call('HSET', KEYS[1], 'o', rec, 'm', ARGV[3], 't', token)
  else
    redis.call('HSET', KEYS[1], 'o', rec, 'm', ARGV[3], 't', token, 'k', label)
  end
  -- With a lock-delay ("ttl+delay"), the hash outlives the deadline by it.
  local plus = string.find(ttl, '+', 1, true)
  if plus then
    ttl = string.format('%.0f', tonumber(string.sub(ttl, 1, plus - 1)) + tonumber(string.sub(ttl, plus + 1)))
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  if label == 'election' then
    redis.call('PUBLISH', KEYS[1] .. ':n', 'c')
  end
  if token == us_s then
    return token
  end
  return {1, token, us_s}
end

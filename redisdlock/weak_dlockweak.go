//go:build dlock_weak

package redisdlock

// In the dlock_weak build only, release and renew act on the key whatever
// owner holds it: release is a plain DEL (after leaving the queue) and
// renew a plain PEXPIRE. These are the flaws the fault-injection suite
// (package faultinject) must catch: a retried release or renew whose first
// reply was lost frees or extends the next holder's grant. Never use this
// build for anything else.
func init() {
	releaseScript = newScript(commonLua + `
if redis.call('HDEL', waiters, ARGV[1]) == 1 then
  redis.call('LREM', queue, 1, ARGV[1])
end
redis.call('DEL', lock)
return 1
`)
	renewScript = newScript(`
local t = redis.call('TIME')
local out = {t[1], t[2]}
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[1]))
  out[i + 2] = 1
end
return out
`)
}

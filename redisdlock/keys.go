package redisdlock

import "strings"

// lockKeys are the Redis keys of one lock, in the order the scripts take them
// (lock, queue, waiters, legacy fence, token record, release trace), boxed
// for script.run. The first four share the hash tag {<escaped key>}; the
// last two are shared by every key of the same Redis Cluster slot, and carry
// a hash tag that maps to it (slotTags). So every script touches one slot
// only. They are cut from one string, and never change: the scripts'
// callers share them.
func (d *redisDriver) lockKeys(key string) []any {
	if v, ok := d.keyCache.Load(key); ok {
		return v.([]any)
	}
	keys := buildLockKeys(d.prefix, key)
	// A program locks the same few keys again and again, and building and
	// boxing them costs six allocations per Lock call: keep them, but
	// never more than maxCachedKeys (a program with many keys starts over).
	if d.cachedKeys.Add(1) > maxCachedKeys {
		d.keyCache.Clear()
		d.cachedKeys.Store(0)
	}
	d.keyCache.Store(key, keys)
	return keys
}

// maxCachedKeys bounds the lockKeys cache: under 1.5 KB each with the
// longest keys (dlock.MaxKeyLen).
const maxCachedKeys = 1024

func buildLockKeys(prefix, key string) []any {
	k, p := escapeKey(key), prefix
	lock := p + "{" + k + "}"
	tag := slotTag(lock)
	n, r := len(lock), len(p)+len("tokens:{}")+len(tag) // the lock key, the record
	s := lock + ":q" + lock + ":w" + lock + ":f" + p + "tokens:{" + tag + "}" + p + "released:{" + tag + "}"
	return []any{s[:n], s[:n+2], s[n+2 : 2*n+4], s[2*n+4 : 3*n+6], s[3*n+6 : 3*n+6+r], s[3*n+6+r:]}
}

// escapeKey makes a user key safe inside a hash tag, reversibly: a '}' would
// end the tag early (and one at the start would empty it, which Redis then
// ignores, scattering the lock's keys over several slots).
func escapeKey(key string) string {
	if !strings.ContainsAny(key, "%}") {
		return key
	}
	return strings.NewReplacer("%", "%25", "}", "%7D").Replace(key)
}

func unescapeKey(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return strings.NewReplacer("%7D", "}", "%25", "%").Replace(s)
}

// userKey returns the user key of a Redis key naming a lock or its queue,
// and false for anything else.
func (d *redisDriver) userKey(redisKey string) (string, bool) {
	rest, ok := strings.CutPrefix(redisKey, d.prefix+"{")
	if !ok {
		return "", false
	}
	for _, suffix := range []string{"}", "}:q"} {
		if tag, ok := strings.CutSuffix(rest, suffix); ok && !strings.Contains(tag, "}") {
			return unescapeKey(tag), true
		}
	}
	return "", false
}

// globEscape quotes the characters that are special in a SCAN MATCH pattern.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}

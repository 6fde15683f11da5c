package redisdlock

import (
	"hash/maphash"
	"strconv"
	"strings"
	"sync/atomic"
)

// lockKeys are the Redis keys of one lock, in the order the scripts take them
// (lock, queue, waiters, legacy fence, token record, release trace). The
// first four share the hash tag {<escaped key>}; the last two are shared by
// every key of the same Redis Cluster slot, and carry a hash tag that maps to
// it (slotTags). So every script touches one slot only. They never change:
// the scripts' callers share them.
type lockKeys struct {
	user  string    // the user's key
	names [6]string // cut from one string
	// args are the names as script arguments: pointers, which go-redis
	// sends (and routes on a Cluster) as the strings they point to, and
	// which box without allocating.
	args [6]any
}

// keyCacheSize is the number of places in the lockKeys cache, a power of 2:
// 8 KB of pointers per Client.
const keyCacheSize = 1024

// keyCache keeps the lockKeys of recent user keys, one per place chosen by
// a hash of the user key: a program locks the same few keys again and
// again, and building them costs two allocations, while one that locks
// ever new keys only replaces places, never pays for more.
type keyCache struct {
	seed   maphash.Seed
	places [keyCacheSize]atomic.Pointer[lockKeys]
}

// lockKeys returns key's Redis keys as script arguments (lockKeys.args).
func (d *redisDriver) lockKeys(key string) []any {
	place := &d.keys.places[maphash.String(d.keys.seed, key)&(keyCacheSize-1)]
	if k := place.Load(); k != nil && k.user == key {
		return k.args[:]
	}
	k := buildLockKeys(d.prefix, key)
	place.Store(k)
	return k.args[:]
}

// keyName returns the name of one of lockKeys' args.
func keyName(arg any) string { return *arg.(*string) }

func buildLockKeys(prefix, key string) *lockKeys {
	k, p := escapeKey(key), prefix
	// The lock's hash tag is k: p has no braces, and a key is never empty.
	var tagBuf [8]byte
	tag := strconv.AppendUint(tagBuf[:0], uint64(slotTags()[tagSlot(k)]), 10)
	n := len(p) + len(k) + 2 // the lock key, p{k}
	var b strings.Builder
	b.Grow(4*n + 6 + 2*(len(p)+len(tag)) + len("tokens:{}released:{}"))
	for _, suffix := range [...]string{"", ":q", ":w", ":f"} {
		b.WriteString(p)
		b.WriteByte('{')
		b.WriteString(k)
		b.WriteByte('}')
		b.WriteString(suffix)
	}
	for _, name := range [...]string{"tokens:{", "released:{"} {
		b.WriteString(p)
		b.WriteString(name)
		b.Write(tag)
		b.WriteByte('}')
	}
	s := b.String()
	r := len(p) + len("tokens:{}") + len(tag) // the record
	lk := &lockKeys{user: key, names: [6]string{s[:n], s[n : 2*n+2], s[2*n+2 : 3*n+4], s[3*n+4 : 4*n+6], s[4*n+6 : 4*n+6+r], s[4*n+6+r:]}}
	for i := range lk.names {
		lk.args[i] = &lk.names[i]
	}
	return lk
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

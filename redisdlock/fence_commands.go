package redisdlock

import "strings"

// fencedCommands are the commands Fence.Do runs: each writes the one key
// that is its first argument, and no other key — but for those of
// multiKeyCommands, whose further arguments are keys too. That is what
// makes a fenced write safe to run in the fence's script: every key is
// declared to the server (so a Cluster routes the script to its slot, and
// refuses another slot) and checked by Fence.check, and the command cannot
// reach the fence's record or a key the caller did not name. Commands that
// read or write further keys (RENAME, SORT … STORE, LMOVE, SUNIONSTORE), run
// code (EVAL, FCALL), or act on the server (FLUSHALL, CONFIG) are left out;
// so are reads, which a fence does not order.
var fencedCommands = setOf(
	// strings
	"SET", "SETNX", "SETEX", "PSETEX", "GETSET", "GETDEL", "GETEX", "APPEND", "SETRANGE",
	"INCR", "INCRBY", "INCRBYFLOAT", "DECR", "DECRBY", "SETBIT", "BITFIELD",
	// hashes
	"HSET", "HSETNX", "HMSET", "HDEL", "HINCRBY", "HINCRBYFLOAT",
	// lists
	"LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LSET", "LREM", "LTRIM", "LINSERT",
	// sets
	"SADD", "SREM", "SPOP",
	// sorted sets
	"ZADD", "ZREM", "ZINCRBY", "ZPOPMIN", "ZPOPMAX", "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZREMRANGEBYLEX",
	// streams, HyperLogLog, geo
	"XADD", "XDEL", "XTRIM", "XACK", "PFADD", "GEOADD",
	// any key
	"DEL", "UNLINK", "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "PERSIST",
)

// multiKeyCommands are the commands of fencedCommands whose arguments
// after the first key are all keys: Fence.Do passes them as keys.
var multiKeyCommands = setOf("DEL", "UNLINK")

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// fencedCommand returns cmd in upper case and whether Fence.Do runs it.
func fencedCommand(cmd string) (string, bool) {
	c := strings.ToUpper(cmd)
	return c, fencedCommands[c]
}

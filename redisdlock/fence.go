package redisdlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/redis/go-redis/v9"
)

// FenceKeyPrefix begins the Redis key of every fence's record:
// "dlock:fence:<name>".
const FenceKeyPrefix = DefaultPrefix + "fence:"

// maxFencedArgs bounds the keys and arguments of one fenced write: the
// script passes them to the command through Lua's unpack, whose limit is
// about 8000 values. Split a larger HSet or Del into several writes.
const maxFencedArgs = 4096

// Fence guards writes to Redis data with fencing tokens: a write goes
// through only if its token is not older than the highest token already
// written through the fence, and then records its own. The compare, the
// record and the write are one Lua script, which the server runs without
// any other command in between, so a holder that lost its lock (paused,
// cut off) and writes late is refused once its successor has written:
//
//	orders := redisdlock.NewFence(rdb, "{orders}")
//	err := orders.Set(ctx, lease.Token(), "{orders}:42", "closed", 0)
//	if errors.Is(err, dlock.ErrStaleToken) {
//		// a newer holder has written: stop, write nothing more
//	}
//
// Use one fence for the data one lock key protects, and the tokens of that
// key's leases: tokens of different keys are not ordered with each other.
// The same token may write any number of times. The tokens may come from
// any dlock backend (and any uint64 counter that only goes up).
//
// A call's write is applied once even when go-redis sends it again after
// its reply was lost (the connection failed after the server ran it),
// whatever the client's MaxRetries: each call carries a random write id,
// and the record keeps the ids of the last 8 writes applied, so the resend
// is recognized and runs nothing. Set then returns nil; HSet, Del and Do
// return ErrReplyLost — the write is applied, exactly once; its reply is
// gone. Only a resend that comes after 8 other writes of the fence is
// judged anew, like a new write, and may run a second time
// (docs/fencing.md, section Redis, "A lost reply").
//
// The record is one key, FenceKeyPrefix+name, in the same database as the
// data, holding the highest token in decimal and then the ids of the last
// writes applied, newest first ("<token> <id> …"); it never expires. On a
// Redis Cluster every key of a write must be in the record's hash slot, and on a
// Ring have its hash tag: name the fence with the hash tag of its keys, as
// "{orders}" above. docs/fencing.md, section Redis says what the fence guarantees and
// what it does not (eviction, failover, a Ring's re-sharding).
//
// A Fence is safe for concurrent use, and holds nothing but rdb: create one
// per fence name wherever convenient.
type Fence struct {
	rdb      redis.Scripter
	name     string
	key      string
	evictArg string // ARGV[2] of fence.lua: "1" to refuse an evicting server
}

// FenceOption configures a Fence.
type FenceOption func(*Fence)

// AllowFenceEviction lets a fence create its record on a server whose
// maxmemory-policy is one of the allkeys-* policies, which may evict the
// record under memory pressure — and a fence whose record was evicted takes
// the next write as its first, whatever its token: a stale holder's write
// goes through. Without it, the first write of a fence on such a server
// fails with ErrUnsafeServer. (The volatile-* policies evict only keys with
// an expiry, which the record has not.)
func AllowFenceEviction() FenceOption {
	return func(f *Fence) { f.evictArg = "0" }
}

// NewFence returns the fence name on the server(s) of rdb: a *redis.Client
// (also through Sentinel: redis.NewFailoverClient), *redis.ClusterClient,
// *redis.Ring, or any other client with scripting commands. Nothing is sent
// until the first write; an empty name is reported by every write, with
// dlock.ErrInvalidFence.
func NewFence(rdb redis.Scripter, name string, opts ...FenceOption) *Fence {
	f := &Fence{rdb: rdb, name: name, key: FenceKeyPrefix + name, evictArg: "1"}
	for _, o := range opts {
		o(f)
	}
	return f
}

// Name returns the fence's name.
func (f *Fence) Name() string { return f.name }

// Key returns the Redis key of the fence's record, FenceKeyPrefix+Name: a
// string of the highest token written, in decimal, then the ids of the last
// writes applied, each after a space ("42 9f1c…e19 04b7…c18").
func (f *Fence) Key() string { return f.key }

// Set writes value to key, as SET key value [PX ttl], if token is not older
// than the fence's record. A ttl of 0 sets no expiry, redis.KeepTTL keeps
// the key's expiry (KEEPTTL); a positive ttl is rounded up to whole
// milliseconds. value is any argument go-redis takes.
//
// A refused write returns a *dlock.StaleTokenError, which satisfies
// errors.Is(err, dlock.ErrStaleToken), and writes nothing. A write that
// go-redis sent again after its reply was lost, and that the fence found
// applied, returns nil: SET's reply says nothing more. Errors for bad
// arguments satisfy errors.Is with dlock.ErrInvalidFence (or ErrCrossSlot) and
// send nothing; ErrUnsafeServer is returned for the first write on a server
// that may evict the record (see AllowFenceEviction); dlock.ErrUnavailable
// when the server cannot be reached. Other errors are the server's, wrapped.
func (f *Fence) Set(ctx context.Context, token uint64, key string, value any, ttl time.Duration) error {
	args := []any{value}
	switch {
	case ttl == redis.KeepTTL:
		args = append(args, "KEEPTTL")
	case ttl > 0:
		args = append(args, "PX", ms(ttl))
	case ttl < 0:
		return f.invalid("SET %q: ttl %v: want 0 (no expiry), redis.KeepTTL or a positive duration", key, ttl)
	}
	_, err := f.run(ctx, token, "SET", []string{key}, args)
	if errors.Is(err, ErrReplyLost) {
		return nil
	}
	return err
}

// HSet sets fields of the hash at key, as HSET key field value…, if token
// is not older than the fence's record, and returns the number of fields
// added. values are field, value pairs, or one map[string]any or
// map[string]string. Its errors are Set's, but for a write whose reply was
// lost: it returns 0 and ErrReplyLost, the fields being set.
func (f *Fence) HSet(ctx context.Context, token uint64, key string, values ...any) (int64, error) {
	args, err := hsetArgs(values)
	if err != nil {
		return 0, f.invalid("HSET %q: %v", key, err)
	}
	reply, err := f.run(ctx, token, "HSET", []string{key}, args)
	if err != nil {
		return 0, err
	}
	n, _ := reply.(int64)
	return n, nil
}

// Del deletes keys, as DEL key…, if token is not older than the fence's
// record, and returns the number of keys deleted. Its errors are Set's,
// but for a write whose reply was lost: it returns 0 and ErrReplyLost, the
// keys being deleted.
func (f *Fence) Del(ctx context.Context, token uint64, keys ...string) (int64, error) {
	reply, err := f.run(ctx, token, "DEL", keys, nil)
	if err != nil {
		return 0, err
	}
	n, _ := reply.(int64)
	return n, nil
}

// Do runs one command on key, as cmd key args…, if token is not older than
// the fence's record, and returns its reply as go-redis' Cmd.Val would (an
// int64, a string, a []any, or nil). cmd is one of the commands that write
// only the key that is their first argument — INCRBY, LPUSH, HDEL, ZADD,
// EXPIRE, XADD and the like, listed in docs/fencing.md, section Redis — or DEL or
// UNLINK, whose args are further keys (strings), checked as the first is;
// others (RENAME, EVAL, FLUSHALL, reads) are refused with
// dlock.ErrInvalidFence. Its errors are Set's, but for a write whose reply
// was lost: it returns nil and ErrReplyLost, the command having run once.
//
//	n, err := orders.Do(ctx, lease.Token(), "INCRBY", "{orders}:closed", 1)
func (f *Fence) Do(ctx context.Context, token uint64, cmd, key string, args ...any) (any, error) {
	c, ok := fencedCommand(cmd)
	if !ok {
		return nil, f.invalid("%s %q: %q is not a command Fence.Do runs: it runs the commands that write the one key of their first argument (docs/fencing.md, section Redis)", cmd, key, cmd)
	}
	keys := []string{key}
	if multiKeyCommands[c] {
		// Keys, not arguments: declared to the server and checked like
		// the first (the record, the slot), or DEL key record would
		// delete the record and open the fence to any token.
		for _, a := range args {
			k, ok := a.(string)
			if !ok {
				return nil, f.invalid("%s %q: key %v is a %T, not a string", c, key, a, a)
			}
			keys = append(keys, k)
		}
		args = nil
	}
	return f.run(ctx, token, c, keys, args)
}

// run sends fence.lua for one command. Every argument is checked first, so
// that a bad one sends nothing.
func (f *Fence) run(ctx context.Context, token uint64, cmd string, keys []string, args []any) (any, error) {
	if err := f.check(token, cmd, keys, args); err != nil {
		return nil, err
	}
	skeys := make([]string, 0, 1+len(keys))
	skeys = append(append(skeys, f.key), keys...)
	argv := make([]any, 0, 4+len(args))
	argv = append(append(argv, strconv.FormatUint(token, 10), f.evictArg, writeID(), cmd), args...)
	// EVALSHA, then EVAL if the server lacks the script; routed by the first
	// key, the record, on a Cluster or Ring. go-redis' retries (after a
	// network error, on any client; a Cluster's after a failover too) send
	// this same command, with the same write id: fence.lua runs the write
	// once. A NOSCRIPT reply ran nothing, so the EVAL after it runs it.
	res, err := fenceScript.Run(ctx, f.rdb, skeys, argv...).Slice()
	if err != nil {
		if redis.HasErrorPrefix(err, "CROSSSLOT") {
			// A client check() could not see through (a wrapper around a
			// ClusterClient): the server refused before running anything.
			for _, k := range keys {
				if hashSlot(k) != hashSlot(f.key) {
					return nil, f.misplaced(k, true)
				}
			}
		}
		return nil, wrapErr(fmt.Sprintf("fence %q: %s", f.name, describe(cmd, keys)), err)
	}
	if len(res) == 1 && res[0] == int64(3) {
		return nil, fmt.Errorf("fence %q: %s: %w: the connection failed after the server ran the write; go-redis sent it again, and the fence found it applied and ran nothing: the data holds it once, but what the command answered is not known",
			f.name, describe(cmd, keys), ErrReplyLost)
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("fence %q: %s: unexpected reply %v", f.name, describe(cmd, keys), res)
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		return res[1], nil
	case 0:
		s, _ := res[1].(string)
		recorded, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			// Not a uint64 (the script checked it is decimal): a token
			// above 2^64-1 recorded by hand. Still a refusal.
			recorded = 0
		}
		return nil, &dlock.StaleTokenError{Fence: f.name, Token: token, Recorded: recorded}
	case 2:
		return nil, fmt.Errorf("fence %q: %w: redis at %s: maxmemory-policy is %v: under memory pressure the server may evict the fence's record %q, and then take a stale holder's write as the fence's first; "+
			"set maxmemory-policy noeviction (or a volatile-* policy, which evicts only keys with an expiry), or pass redisdlock.AllowFenceEviction() to NewFence to accept that risk",
			f.name, ErrUnsafeServer, scripterAddr(f.rdb), res[1], f.key)
	}
	return nil, fmt.Errorf("fence %q: %s: unexpected reply %v", f.name, describe(cmd, keys), res)
}

// writeID returns a new write id for fence.lua: 128 random bits in hex, so
// that no two writes of a fence (within the ids its record keeps) share one.
// crypto/rand does not fail (since Go 1.24 it crashes the program instead).
func writeID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// check returns an error satisfying dlock.ErrInvalidFence or ErrCrossSlot for a
// write that cannot be fenced.
func (f *Fence) check(token uint64, cmd string, keys []string, args []any) error {
	switch {
	case f.name == "":
		return fmt.Errorf("%w: empty fence name", dlock.ErrInvalidFence)
	case token == 0:
		return f.invalid("%s: token 0 is no lease's token", describe(cmd, keys))
	case len(keys) == 0:
		return f.invalid("%s: no key", cmd)
	case len(keys)+len(args) > maxFencedArgs:
		return f.invalid("%s: %d keys and arguments, more than %d: split the write", describe(cmd, keys), len(keys)+len(args), maxFencedArgs)
	}
	for _, k := range keys {
		switch {
		case k == "":
			return f.invalid("%s: empty key", cmd)
		case k == f.key:
			return f.invalid("%s: key %q is the fence's own record", cmd, k)
		case strings.HasPrefix(k, FenceKeyPrefix):
			// Another fence's record: writing it would move that
			// fence's token, or delete it and let any token through.
			return f.invalid("%s: key %q is a fence's record (FenceKeyPrefix %q): only that fence writes it", cmd, k, FenceKeyPrefix)
		}
	}
	// Where the client places keys by their hash tag, every key must go
	// where the record is. A plain client (a single server, Sentinel) takes
	// any key.
	switch f.rdb.(type) {
	case *redis.ClusterClient:
		for _, k := range keys {
			if hashSlot(k) != hashSlot(f.key) {
				return f.misplaced(k, true)
			}
		}
	case *redis.Ring:
		for _, k := range keys {
			if hashTag(k) != hashTag(f.key) {
				return f.misplaced(k, false)
			}
		}
	}
	return nil
}

func (f *Fence) invalid(format string, args ...any) error {
	return fmt.Errorf("fence %q: %w: %s", f.name, dlock.ErrInvalidFence, fmt.Sprintf(format, args...))
}

// misplaced explains a key outside the record's slot (cluster) or shard
// (a Ring), with the hash tag that would put it there.
func (f *Fence) misplaced(key string, cluster bool) error {
	var what string
	if cluster {
		what = fmt.Sprintf("key %q is in hash slot %d, the fence's record %q in slot %d: on a Redis Cluster every key of a fenced write must be in the record's slot",
			key, hashSlot(key), f.key, hashSlot(f.key))
	} else {
		what = fmt.Sprintf("key %q has hash tag %q, the fence's record %q has %q: on a Ring every key of a fenced write must have the record's hash tag",
			key, hashTag(key), f.key, hashTag(f.key))
	}
	var hint string
	if tag := hashTag(f.key); hasHashTag(f.key) {
		hint = fmt.Sprintf("put the fence's hash tag {%s} first in the key, e.g. %q", tag, tagged(tag, key))
	} else {
		hint = fmt.Sprintf("give the fence a hash tag that its keys share: NewFence(rdb, %q) with keys such as %q", "{"+f.name+"}", tagged(f.name, key))
	}
	return fmt.Errorf("fence %q: %w: %s; %s", f.name, ErrCrossSlot, what, hint)
}

// tagged suggests key with hash tag tag: "orders:42" becomes "{orders}:42",
// "x" becomes "{orders}:x".
func tagged(tag, key string) string {
	if rest, ok := strings.CutPrefix(key, tag); ok && rest != "" {
		return "{" + tag + "}" + rest
	}
	return "{" + tag + "}:" + key
}

// describe names a write in messages: `SET "k"`, `DEL "a" (and 2 more keys)`.
func describe(cmd string, keys []string) string {
	switch len(keys) {
	case 0:
		return cmd
	case 1:
		return fmt.Sprintf("%s %q", cmd, keys[0])
	}
	return fmt.Sprintf("%s %q (and %d more keys)", cmd, keys[0], len(keys)-1)
}

// hsetArgs flattens HSet's values into field, value arguments.
func hsetArgs(values []any) ([]any, error) {
	if len(values) == 1 {
		switch m := values[0].(type) {
		case map[string]any:
			values = flatten(m)
		case map[string]string:
			values = flatten(m)
		}
	}
	switch {
	case len(values) == 0:
		return nil, fmt.Errorf("no field")
	case len(values)%2 != 0:
		return nil, fmt.Errorf("%d values: want field, value pairs, or one map[string]any or map[string]string", len(values))
	}
	return values, nil
}

// flatten returns a map's fields and values, in field order so that the
// command is the same at every run.
func flatten[V any](m map[string]V) []any {
	out := make([]any, 0, 2*len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k, m[k])
	}
	return out
}

// scripterAddr names the server(s) of a fence's client for messages.
func scripterAddr(rdb redis.Scripter) string {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return "a node of " + strings.Join(c.Options().Addrs, ",")
	}
	return fmt.Sprintf("%T", rdb)
}

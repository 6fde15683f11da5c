package redisdlock

import (
	"context"
	_ "embed"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The scripts are the whole algorithm; docs/redis.md explains it. Each is
// common.lua followed by its own body (acquire's has a free key's and a
// lock's join's fast paths in front, release's a lock holder's), and runs
// atomically on the server.
var (
	//go:embed scripts/common.lua
	commonLua string
	//go:embed scripts/acquire_free.lua
	acquireFreeLua string
	//go:embed scripts/acquire_join.lua
	acquireJoinLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/release_lock.lua
	releaseLockLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/revoke.lua
	revokeLua string
	//go:embed scripts/publish.lua
	publishLua string
	//go:embed scripts/fence.lua
	fenceLua string

	acquireScript = newScript(acquireFreeLua + acquireJoinLua + commonLua + acquireLua) // a free key's path first, then a lock's join
	releaseScript = newScript(releaseLockLua + commonLua + releaseLua)                  // a lock's holder's path first
	renewScript   = newScript(renewLua)                                                 // alone: it needs nothing of common.lua
	inspectScript = newScript(commonLua + inspectLua)
	revokeScript  = newScript(commonLua + revokeLua)
	publishScript = newScript(publishLua) // alone, as renew.lua
	// Fence's, run by redis.Script.Run: it takes any redis.Scripter.
	fenceScript = redis.NewScript(fenceLua)
)

// script runs one Lua script by EVALSHA, falling back to EVAL when the
// server does not have it cached, as redis.Script.Run does. It exists
// because Script.Run takes the keys as []string and boxes each into an
// interface on every call: here the caller passes keys (and the owner id)
// already boxed, once per Lock call rather than once per request, and the
// digest and source are boxed once per process. The command sent is the same.
type script struct {
	*redis.Script
	sha, src any
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, sha: s.Hash(), src: src}
}

// run sends EVALSHA sha len(keys) keys... args...: see send.
func (s *script) run(ctx context.Context, d *redisDriver, keys []any, args ...any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, nil, nil, numKeys(len(keys)))
	a = append(a, keys...)
	a = append(a, args...)
	return s.send(ctx, d, a)
}

// send runs the script with a as EVALSHA's arguments: it fills in a[0] and
// a[1], the command and the digest, and takes the rest as it is (the
// number of keys, the keys, the arguments). It sends them through d's
// go-redis client, alone or in a pipeline with calls that overlap (pipe.go;
// either way go-redis routes it by its first key on a Cluster, and retries
// and hooks apply), unless the server cannot be dialled (see
// notifier.unreachable): then it fails with the dial's error, sending
// nothing.
func (s *script) send(ctx context.Context, d *redisDriver, a []any) *redis.Cmd {
	cmd := s.sendAs(ctx, d, a, false)
	if noScript(cmd.Err()) {
		cmd = s.sendAs(ctx, d, a, true)
	}
	return cmd
}

// sendAs sends a once, as EVALSHA with the digest, or with src as EVAL with
// the source, with no fallback: see send.
func (s *script) sendAs(ctx context.Context, d *redisDriver, a []any, src bool) *redis.Cmd {
	if err := d.notify.unreachable(); err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	a[0], a[1] = "evalsha", s.sha
	if src {
		a[0], a[1] = "eval", s.src
	}
	return d.pipe.do(ctx, a, s.role())
}

// role is s's call's role in the ordering of pipe.
func (s *script) role() pipeRole {
	switch s {
	case acquireScript:
		return roleAcquire
	case releaseScript:
		return roleRelease
	case renewScript:
		return roleRenew
	}
	return roleOther
}

// noScript reports whether err is Redis' NOSCRIPT: the server has not got
// the script cached and ran nothing.
func noScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// numKeysArgs are EVALSHA's numbers of keys, boxed once: a string, which
// go-redis reads as it is when it looks for a Cluster command's first key
// (an int it would format, allocating, on every request).
var numKeysArgs = [...]any{"0", "1", "2", "3", "4", "5", "6"}

// numKeys returns n as EVALSHA's number of keys.
func numKeys(n int) any {
	if n < len(numKeysArgs) {
		return numKeysArgs[n]
	}
	return strconv.Itoa(n)
}

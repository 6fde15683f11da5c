package redisdlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// grant is a lock held on Redis. It implements driver.Grant.
type grant struct {
	d         *redisDriver
	keys      []any    // lockKeys
	owner     ownerArg // the owner id, as the scripts store it
	ttl       time.Duration
	ttlMs     int64   // ttl as the scripts take it
	meta      metaArg // the request's metadata
	token     uint64
	validFrom time.Time

	// clock is the latest reading of the server's clock, from the grant or
	// the last renewal: what the next renewal's reading is compared with.
	// Only renewals (Renew, RenewBatch) use it after the grant, and the
	// lease engine runs one renewal of a grant at a time.
	clock clockReading

	// EVALSHA's arguments, laid out here: acquire.lua's (newGrant), then
	// release.lua's (releaseCmd), and renew.lua's on their own, since a
	// renewal may run beside the release. The arguments point to the
	// fields above (go-redis takes *string, *int64, *uint64), so sending
	// allocates nothing of ours.
	cmd        [3 + 6 + 7]any
	acquireLen int // of acquire.lua's command in cmd
	renewCmd   [3 + 1 + 2]any
}

// metaArg is metadata as a script argument: go-redis sends a
// BinaryMarshaler's bytes, and a pointer to one boxes without allocating.
type metaArg []byte

func (m *metaArg) MarshalBinary() ([]byte, error) { return *m, nil }

// releaseCmd lays out release.lua's command in g.cmd: the keys, the owner
// and the token (0 for an attempt never granted).
func (g *grant) releaseCmd() []any {
	a := g.cmd[:3+len(g.keys)+2]
	a[2] = numKeys(len(g.keys))
	copy(a[3:], g.keys)
	a[3+len(g.keys)], a[4+len(g.keys)] = &g.owner, &g.token
	return a
}

func (g *grant) Token() uint64           { return g.token }
func (g *grant) ValidFrom() time.Time    { return g.validFrom }
func (g *grant) Validity() time.Duration { return g.ttl }

// Lost returns nil: Redis cannot tell us, and renewals find out soon enough.
func (g *grant) Lost() <-chan error { return nil }

// Renew extends the lease if the key is still ours (renew.lua, sent the
// lock's key only). Extending counts from when the server runs the script,
// which is after this call started, as the lease engine assumes.
// RenewBatch (renew.go) does the same for many grants in one request.
func (g *grant) Renew(ctx context.Context) error {
	sent := time.Now()
	g.renewCmd = [...]any{nil, nil, numKeysArgs[1], g.keys[0], &g.ttlMs, &g.owner}
	var cmd *redis.Cmd
	var ack acked
	src := false // EVALSHA until the server says NOSCRIPT
	untilAnswered(ctx, func(ctx context.Context) tryOutcome {
		cmd, ack = renewScript.sendAckedAs(ctx, g.d, g.renewCmd[:], src)
		switch err := cmd.Err(); {
		case noScript(err):
			src = true
			return resend
		case silent(err):
			return unanswered
		}
		return answered
	})
	v, err := cmd.Slice()
	received := time.Now()
	if err != nil {
		return wrapErr(fmt.Sprintf("redis at %s: renew", g.d.addr), err)
	}
	server, ok := parseRenewTime(v, 1)
	if !ok {
		return fmt.Errorf("redis at %s: renew: unexpected reply %v", g.d.addr, v)
	}
	held := v[2] == int64(1)
	if err := g.d.ackErr(ack, "renewal"); held && err != nil {
		return err // a failed renewal: validity is not counted from it
	}
	return g.renewed(held, clockReading{sent: sent, received: received, serverUs: server})
}

// renewed takes renew.lua's answer for g: held, and the server's clock
// when the script ran.
//
// The script reads the server's clock because Redis expires keys by its
// wall clock: when that clock steps ahead the key may expire long before
// the lease's local deadline, and pass to another owner. Nothing tells us
// before we ask; a renewal finds the key gone, and its error then says how
// far the server's clock ran ahead (clockReading.ahead), so that the cause
// is plain. A renewal that finds the key still ours needs no such check:
// the hash names its owner, and no grant to anybody else leaves it that
// way, so nobody else can have held the key, whatever the clock did.
func (g *grant) renewed(held bool, now clockReading) error {
	if !held {
		if ahead := g.clock.ahead(now); ahead > 0 {
			return fmt.Errorf("%w: the key expired or passed to another owner, and the server's clock ran at least %v ahead of this process's since the grant or the last renewal "+
				"(the server's clock was stepped, or this machine was suspended): Redis expires keys by its own clock, so the key may have expired early, while the lease was still valid here",
				errNotHeld, ahead.Round(time.Millisecond))
		}
		return fmt.Errorf("%w: the key expired or passed to another owner", errNotHeld)
	}
	g.clock = now
	return nil
}

// parseRenewTime reads the server's TIME from renew.lua's reply
// {seconds, microseconds, r1, …, rn}, checking that it has n results.
func parseRenewTime(v []any, n int) (serverUs int64, ok bool) {
	if len(v) != 2+n {
		return 0, false
	}
	s, ok1 := v[0].(string)
	us, ok2 := v[1].(string)
	if !ok1 || !ok2 {
		return 0, false
	}
	sec, err1 := parseInt(s)
	usec, err2 := parseInt(us)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return sec*1_000_000 + usec, true
}

// Release gives the key up and hands it to the next waiter (release.lua).
// The token lets a release resent after a lost reply recognise that its
// first attempt freed the key.
func (g *grant) Release(ctx context.Context) error {
	cmd, ack := releaseScript.sendAcked(ctx, g.d, g.releaseCmd())
	n, err := cmd.Int()
	if err != nil {
		return wrapErr(fmt.Sprintf("redis at %s", g.d.addr), err)
	}
	if n == 0 {
		return fmt.Errorf("%w: the key expired or passed to another owner before the release", errNotHeld)
	}
	// Freed on the master, which may hand the key on at once; a failover
	// to a replica without the release keeps the key until its TTL.
	if err := g.d.ackErr(ack, "release"); err != nil {
		return fmt.Errorf("%w (the master freed the key; after a failover to a replica without the release, the key stays locked until its TTL runs out)", err)
	}
	return nil
}

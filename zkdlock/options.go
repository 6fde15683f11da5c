package zkdlock

import (
	"fmt"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/go-zookeeper/zk"
)

const (
	// DefaultRoot is the node under which dlock keeps its key nodes.
	DefaultRoot = "/dlock"

	// DefaultSessionTimeout is the session timeout Open asks for, and so the
	// lease length: the same as dlock.DefaultTTL, for the same reasons. The
	// server may raise or lower it to fit its minSessionTimeout and
	// maxSessionTimeout (by default 2 and 20 ticks: 4 s to 40 s); Open uses
	// what the server granted.
	DefaultSessionTimeout = dlock.DefaultTTL

	// DefaultConnectTimeout is how long Open waits for a session before it
	// gives up with dlock.ErrUnavailable: go-zookeeper tries every server
	// once a second, so this is about five rounds.
	DefaultConnectTimeout = 5 * time.Second

	// DefaultLockDelaySweep is how often a Client looks through its root's
	// lock-delay marks for ones left by a Client that died (see
	// Options.LockDelaySweep): a listing a minute per Client is next to
	// nothing for the server, and a mark left that way then goes within a
	// few minutes of its delay's end (docs/zookeeper.md, "Revoke and
	// lock-delay").
	DefaultLockDelaySweep = time.Minute
)

// Options configure the ZooKeeper backend for New. The zero value (or nil)
// selects the defaults, except SessionTimeout, which New needs.
type Options struct {
	// Root is the node under which every key gets a child. Default
	// DefaultRoot. New creates it (and its parents) if it is missing.
	Root string

	// SessionTimeout is the session timeout conn negotiated with the
	// server, which is the lease length on ZooKeeper (see the package
	// documentation). zk.Conn does not report it, so New requires it: give
	// the timeout passed to zk.Connect, and make sure it lies within the
	// server's minSessionTimeout and maxSessionTimeout. A value above what
	// the server granted would let a cut-off holder believe in its lease
	// after the server gave the key away.
	SessionTimeout time.Duration

	// ACL is the access list of the nodes dlock creates (root, key nodes
	// and lock nodes). Default zk.WorldACL(zk.PermAll). With digest
	// credentials, use for example
	//
	//	append(zk.DigestACL(zk.PermAll, user, password), zk.WorldACL(zk.PermRead)...)
	//
	// so that other clients can inspect locks but cannot delete them (which
	// needs the delete permission on the key node).
	ACL []zk.ACL

	// TickTime is the ensemble's tickTime, or more: never less. In an
	// ensemble only the leader expires sessions, and it hears of a
	// follower's clients only from the follower's replies to its pings,
	// every half tick; a lease counts only from activity the leader is
	// known to have heard of, which a Client learns about half a tick
	// (plus an eighth for delivery) after the activity (docs/zookeeper.md,
	// "Ensembles"). Zero: unknown, and zkdlock assumes the largest tick
	// that ZooKeeper's default minSessionTimeout (two ticks) allows for
	// SessionTimeout, half of it. At most SessionTimeout/2. A tick says
	// that the servers form an ensemble: it turns the detection of a
	// standalone server off, and excludes Deployment Standalone.
	TickTime time.Duration

	// Deployment says whether the server is a standalone ZooKeeper or
	// members of an ensemble, which decides from which moment a lease
	// counts. The zero value, Detect, finds out: see Detect.
	Deployment Deployment

	// LockDelaySweep is how often, on average, the Client sweeps the
	// index of its root's lock-delay marks (dlock.WithLockDelay): a
	// listing, and a look at up to three marks, which deletes those whose
	// Client died once their delay is over, though nobody uses their keys
	// again. Each sweep waits between half and one and a half of it.
	// Default DefaultLockDelaySweep; it may not be negative. In a URL:
	// lock_delay_sweep=.
	LockDelaySweep time.Duration

	// ClientOptions are passed to dlock.NewClient (WithMetadata, WithLogger
	// defaults for every lock). WithTTL cannot change the lease length on
	// ZooKeeper: New refuses one other than SessionTimeout.
	ClientOptions []dlock.Option
}

func (o *Options) withDefaults(needTimeout bool) (Options, error) {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Root == "" {
		out.Root = DefaultRoot
	}
	if err := checkRoot(out.Root); err != nil {
		return out, fmt.Errorf("%w: zkdlock.Options.Root %q %w", dlock.ErrInvalidOption, out.Root, err)
	}
	if out.SessionTimeout == 0 && needTimeout {
		return out, fmt.Errorf("%w: zkdlock.Options.SessionTimeout is required: the session timeout of the connection (the lease length)", dlock.ErrInvalidOption)
	}
	if out.SessionTimeout != 0 && (out.SessionTimeout < dlock.MinTTL || out.SessionTimeout > dlock.MaxTTL) {
		return out, fmt.Errorf("%w: zkdlock.Options.SessionTimeout %v is outside [%v, %v]", dlock.ErrInvalidOption, out.SessionTimeout, dlock.MinTTL, dlock.MaxTTL)
	}
	if out.Deployment < Detect || out.Deployment > Ensemble {
		return out, fmt.Errorf("%w: zkdlock: unknown Deployment %d", dlock.ErrInvalidOption, out.Deployment)
	}
	if err := checkTick(out.TickTime, out.Deployment, out.SessionTimeout); err != nil {
		return out, fmt.Errorf("%w: zkdlock: %v", dlock.ErrInvalidOption, err)
	}
	if out.LockDelaySweep < 0 {
		return out, fmt.Errorf("%w: zkdlock.Options.LockDelaySweep %v is negative", dlock.ErrInvalidOption, out.LockDelaySweep)
	}
	if len(out.ACL) == 0 {
		out.ACL = zk.WorldACL(zk.PermAll)
	}
	return out, nil
}

// checkTick validates TickTime and Deployment against a session timeout
// (0: not known yet). A tick above half the timeout would keep renewals
// from proving anything before the lease runs out.
func checkTick(tick time.Duration, dep Deployment, timeout time.Duration) error {
	switch {
	case tick < 0:
		return fmt.Errorf("tick time %v is negative", tick)
	case tick > 0 && dep == Standalone:
		return fmt.Errorf("a tick time (%v) is for an ensemble: it excludes standalone", tick)
	case tick > 0 && timeout > 0 && tick > timeout/2:
		return fmt.Errorf("tick time %v is more than half the session timeout %v: ZooKeeper's default minSessionTimeout is two ticks, and a lease could not be kept", tick, timeout)
	}
	return nil
}

// reportLag returns the bound on how long after a request touched the
// session on the server it was sent to the leader has heard of it (see
// heard): 0 for a server stated to be standalone; otherwise half a tick,
// the leader's ping interval, plus an eighth of it for the ping's delivery
// and the follower's scheduling. Without a tick it assumes the largest
// that ZooKeeper's default minSessionTimeout (two ticks) allows for the
// session timeout: timeout/2, so a lag of 9/32 of the timeout. A server
// found standalone by detection keeps this lag for every request but the
// check itself (see standalone.go).
func reportLag(tick time.Duration, dep Deployment, timeout func() time.Duration) func() time.Duration {
	return func() time.Duration {
		if dep == Standalone {
			return 0
		}
		t := tick
		if t == 0 {
			t = timeout() / 2
		}
		return t/2 + t/16
	}
}

// detects reports whether a Client with these settings looks for a
// standalone server: only when nothing says what the servers are.
func detects(tick time.Duration, dep Deployment) bool { return dep == Detect && tick == 0 }

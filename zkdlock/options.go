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
		return out, fmt.Errorf("%w: zkdlock: %v", dlock.ErrInvalidOption, err)
	}
	if out.SessionTimeout == 0 && needTimeout {
		return out, fmt.Errorf("%w: zkdlock: Options.SessionTimeout is required: the session timeout of the connection (the lease length)", dlock.ErrInvalidOption)
	}
	if out.SessionTimeout != 0 && (out.SessionTimeout < dlock.MinTTL || out.SessionTimeout > dlock.MaxTTL) {
		return out, fmt.Errorf("%w: zkdlock: session timeout %v is outside [%v, %v]", dlock.ErrInvalidOption, out.SessionTimeout, dlock.MinTTL, dlock.MaxTTL)
	}
	if len(out.ACL) == 0 {
		out.ACL = zk.WorldACL(zk.PermAll)
	}
	return out, nil
}

package etcddlock

import (
	"time"

	"github.com/dlockdev/dlock"
)

const (
	// DefaultPrefix starts the name of every etcd key dlock writes. The
	// slash keeps dlock's keys in a directory of their own for etcdctl and
	// for role permissions (etcdctl role grant-permission --prefix ROLE
	// readwrite dlock/).
	DefaultPrefix = "dlock/"

	// DefaultDialTimeout bounds how long Open waits for the first answer
	// from etcd (the reachability and credentials check), unless the
	// context passed to Open ends first.
	DefaultDialTimeout = 5 * time.Second
)

// Options configure the etcd backend. The zero value (or nil) selects the
// defaults.
type Options struct {
	// Prefix starts every etcd key dlock writes, and is used as is (add the
	// trailing slash yourself). Default DefaultPrefix. Clients that share
	// locks must use the same prefix.
	Prefix string

	// AllowUnsafeVersion lets New and Open accept a cluster with a member
	// whose etcd version can revoke a live lease: by default they refuse one
	// with ErrUnsafeServer. Before 3.4.31, 3.5.13 and 3.6.0, a leader that
	// pauses (a stalled disk, CPU starvation, a frozen VM) and resumes
	// revokes the leases that expired by its own clock, after a new leader
	// renewed them: the server deletes a held lock's entry and grants the
	// key to the next waiter while the holder's Lease is valid. Set it only
	// if such a double grant is acceptable, or while upgrading. It also
	// skips the check itself, which fails Open and New with
	// dlock.ErrUnavailable when a member cannot be reached. URL parameter:
	// allow_unsafe_version=true.
	AllowUnsafeVersion bool

	// LeasePerGrant gives every call's entry an etcd lease of its own
	// instead of the Client's shared one (docs/etcd.md, One lease per
	// Client and TTL): one more Raft write per call, and one keep-alive
	// per held lock. It lets a grant be renewed and released by reference
	// from another process (the gateway's leases served by any instance)
	// without renewing the Client's other locks. URL parameter:
	// lease_per_grant=true.
	LeasePerGrant bool

	// ClientOptions are passed to dlock.NewClient (WithTTL, WithMetadata,
	// WithLogger defaults for every lock).
	ClientOptions []dlock.Option
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Prefix == "" {
		out.Prefix = DefaultPrefix
	}
	return out
}

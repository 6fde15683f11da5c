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

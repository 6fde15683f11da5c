package zkdlock

import (
	"context"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// KeyPathForTest returns the node of key under root.
func KeyPathForTest(root, key string) string { return root + "/" + escapeKey(key) }

// EscapeKeyForTest and UnescapeKeyForTest expose the key mapping.
var (
	EscapeKeyForTest   = escapeKey
	UnescapeKeyForTest = unescapeKey
)

// SetListAskHookForTest makes f run whenever an attempt asks for a listing
// of a key's queue (nil: stop).
func SetListAskHookForTest(f func(keyPath string)) {
	if f == nil {
		onListAsk.Store(nil)
		return
	}
	onListAsk.Store(&f)
}

// RevokerForTest returns a driver on conn, as New makes it, for the tests
// of Revoke and of AcquireRequest.LockDelay, which package dlock does not
// reach yet; close closes it.
func RevokerForTest(ctx context.Context, conn Conn, opts *Options) (d interface {
	driver.Driver
	driver.Revoker
	driver.Inspector
}, close func(), err error) {
	o, err := opts.withDefaults(true)
	if err != nil {
		return nil, nil, err
	}
	timeout := o.SessionTimeout
	zd := newDriver(conn, o, "the zk.Conn given to New", func() time.Duration { return timeout }, nil)
	if err := zd.init(ctx, nil); err != nil {
		_ = zd.Close()
		return nil, nil, err
	}
	return zd, func() { _ = zd.Close() }, nil
}

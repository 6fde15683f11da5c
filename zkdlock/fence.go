package zkdlock

import (
	"errors"
	"fmt"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/leasegrant"
	"github.com/go-zookeeper/zk"
)

// MultiConn is what MultiHeld needs of a connection: *zk.Conn, or any
// connection to the same ensemble, not necessarily the Client's.
type MultiConn interface {
	Multi(ops ...any) ([]zk.MultiResponse, error)
}

// CheckHeld returns a check op on the lease's lock node: put it in your own
// conn.Multi, first, and the transaction commits only while the lease
// still holds its key on the server, so that a holder that lost its lease
// (paused past the session timeout, cut off until its session expired)
// cannot write to ZooKeeper any more:
//
//	check, err := zkdlock.CheckHeld(lease)
//	…
//	rs, err := conn.Multi(check, &zk.SetDataRequest{Path: "/orders/state", Data: b, Version: -1})
//
// When the lease no longer holds, the check's result (rs[0].Error) is
// zk.ErrNoNode (the node is gone: the session expired, the lease was
// released, an operator deleted it) or zk.ErrBadVersion (somebody else
// wrote the node, which hands the key to the waiter behind), and nothing of
// the Multi is applied. MultiHeld does the same and returns those as
// dlock.ErrStaleToken.
//
// Why the node's existence is the lease: it is ephemeral, so the server
// deletes it with the session; the next holder is granted only once it is
// gone or written (a release writes and deletes it in one transaction; see
// rule.go and Release); and a granted node stays granted while it is there,
// in every mode: a semaphore's permit, a reader, an election's leader. The
// check expects the data version of the grant (that of the create), so a
// write by anybody else fails it too; an
// election's leader rewrites its own node (Proclaim), which hands nothing
// over (its candidates wait for the node's deletion), so its check matches
// any version. No other node can ever have the path: its name carries the
// lease's owner, 128 random bits drawn for this one Lock call, and a
// sequence number, and the call creates no node after its grant.
//
// The check is decided by the ensemble's leader in the order of all writes,
// with the Multi's other ops, so it holds even when the Multi goes through
// another connection or session than the lease's; the lease's local state
// (Done) plays no part. It needs READ permission on the lock node (dlock's
// nodes are readable by anyone unless Options.ACL says otherwise).
//
// CheckHeld sends nothing. It returns an error satisfying
// errors.Is(err, dlock.ErrInvalidFence) for a nil lease or one of another backend.
func CheckHeld(lease *dlock.Lease) (*zk.CheckVersionRequest, error) {
	g, err := grantOf("zkdlock.CheckHeld", lease)
	if err != nil {
		return nil, err
	}
	return &zk.CheckVersionRequest{Path: g.path, Version: g.checkVersion()}, nil
}

// MultiHeld runs ops (*zk.CreateRequest, *zk.SetDataRequest,
// *zk.DeleteRequest, *zk.CheckVersionRequest) in one conn.Multi after the
// check of CheckHeld: all of them are applied while the lease still holds
// its key, or none. It returns the responses of ops, in their order (the
// check's is left out).
//
// A refused check returns an error satisfying errors.Is(err,
// dlock.ErrStaleToken), a *dlock.StaleTokenError (Fence: the key, Token:
// the lease's, Recorded: 0) wrapped with why: the lease was lost (perhaps
// while this process was paused) and nothing was written.
// Other errors are as conn.Multi returned them, wrapped with the key: one of
// ops failed (errors.Is(err, zk.ErrBadVersion), …; see the responses), or
// the connection failed. After zk.ErrConnectionClosed, or a net.Error
// from the request's own write, the Multi may have been applied, but only
// while the lease held.
//
// With no ops, MultiHeld asks the leader whether the lease still holds.
func MultiHeld(conn MultiConn, lease *dlock.Lease, ops ...any) ([]zk.MultiResponse, error) {
	g, err := grantOf("zkdlock.MultiHeld", lease)
	if err != nil {
		return nil, err
	}
	all := append(make([]any, 0, len(ops)+1), &zk.CheckVersionRequest{Path: g.path, Version: g.checkVersion()})
	all = append(all, ops...)
	rs, err := conn.Multi(all...)
	if len(rs) > 0 {
		// A failed multi reports every op: ZOK for those before the one
		// that failed, its error for it, ZRUNTIMEINCONSISTENCY after it.
		// So the check's own result says whether the check failed.
		switch {
		case errors.Is(rs[0].Error, zk.ErrNoNode):
			return rs[1:], g.stale("is gone (its session expired, or it was released or deleted)")
		case errors.Is(rs[0].Error, zk.ErrBadVersion):
			return rs[1:], g.stale("was written by somebody else, which hands the key to the waiter behind it")
		}
		rs = rs[1:]
	}
	if err != nil {
		return rs, fmt.Errorf("multi under lease %q: %w", g.key, err)
	}
	if len(rs) != len(ops) {
		return rs, fmt.Errorf("multi under lease %q: %d responses to %d ops", g.key, len(rs), len(ops))
	}
	return rs, nil
}

// grantOf returns the grant behind lease, or dlock.ErrInvalidFence.
func grantOf(call string, lease *dlock.Lease) (*grant, error) {
	if lease == nil {
		return nil, fmt.Errorf("%s: nil lease: %w", call, dlock.ErrInvalidFence)
	}
	g, ok := leasegrant.Of(lease).(*grant)
	if !ok || g == nil {
		return nil, fmt.Errorf("%s: lease of key %q: %w: not a ZooKeeper lease", call, lease.Key(), dlock.ErrInvalidFence)
	}
	return g, nil
}

// checkVersion is the data version a check of the grant's node expects:
// the grant's own (see CheckHeld), or -1, any, for an election's leader,
// whose Publish changes it and hands nothing over.
func (g *grant) checkVersion() int32 {
	if g.publishes {
		return -1
	}
	// Not written by us after that but by the release, which deletes it in
	// the same transaction; the lock is for the race detector's sake.
	g.verMu.Lock()
	defer g.verMu.Unlock()
	return g.version
}

// stale is MultiHeld's error for a refused check: the node is gone, or
// was written (why). The fence is the key; ZooKeeper records no token, so
// Recorded is 0:
//
//	fence "k": dlock: stale fencing token: 42: lock node lock-…-0000000003 is gone (…); nothing was written
func (g *grant) stale(why string) error {
	return fmt.Errorf("%w: lock node %s %s; nothing was written", &dlock.StaleTokenError{Fence: g.key, Token: g.token}, g.nodeName(), why)
}

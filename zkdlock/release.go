package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// Release removes the lock node with one transaction: a setData on the node
// (no data, any version), then its delete. The waiter behind the node holds
// a one-shot data watch on it, so it is notified once, of the setData —
// EventNodeDataChanged, not EventNodeDeleted — and the delete is part of the
// same committed transaction. Only a releasing holder ever writes to a lock
// node (its metadata is set by the create; an election's leader writes its
// own, and its candidate reads it again instead: see Publish), so that event tells the waiter
// that its predecessor was the holder and that the key is its own now,
// without listing the queue again; a plain delete (a waiter giving up, an
// expired session, an operator) says nothing of the kind, and the waiter
// looks, unless the deleted node headed its listing. See attempt.waitFor.
// A lock whose grant's listing showed no node behind its own is released
// with a plain delete: any waiter behind it listed it at the head (see
// attempt.take), so the mark would tell it nothing more; and so is a
// semaphore's permit, whose waiters count deletions (see
// attempt.plainRelease).
//
// The node's name carries this grant's owner, so the release can never
// remove anybody else's node, even when retried: a retry after a lost reply
// finds no node and does nothing. A release whose answer was lost (the
// connection broke, or it got none within the session timeout) is
// confirmed within the session (confirmRelease) rather than reported
// unsure. When the release cannot be confirmed, a janitor keeps trying:
// otherwise the node would block the key for as long as the session lives.
func (g *grant) Release(ctx context.Context) error {
	g.cancel()
	d := g.d
	err := g.remove(ctx, -1)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("%w: lock node %s was already gone (session expired or node deleted)", driver.ErrNotHeld, g.nodeName())
	case transient(err):
		if err = g.confirmRelease(ctx, err); err == nil {
			return nil
		}
	}
	d.goJanitor(func(ctx context.Context) {
		for i := 0; ; i++ {
			err := g.remove(ctx, -1)
			if err == nil || errors.Is(err, zk.ErrNoNode) || isCtxErr(err) {
				return
			}
			if backoff(ctx, i, g.validity/2) != nil {
				return
			}
		}
	})
	return d.wrapErr("delete lock node "+g.nodeName(), err)
}

// confirmPause is how long go-zookeeper's default host provider pauses
// before it dials a server it tried last (Open's does not): a release is
// confirmed for up to a session timeout (the server's at least, after the
// last it heard) after that, while the session may still be alive.
const confirmPause = time.Second

// confirmRelease finds out what a release whose answer was lost (err) did,
// by sending it again on the same session once go-zookeeper has
// reconnected: a write goes through the leader, after the first release if
// that was applied, so its answer is the truth. It returns nil when the
// node is gone, deleted by the first release or by this one; and err, or
// the session's end, when the session changed (the server expired it, and
// the node with it, at a moment nobody can tell) or no answer came within
// ctx and a session timeout plus confirmPause. A node that somebody else deleted just before
// the first release arrived (a revoke) looks the same: the key is free of
// it either way, and a deletion seen before Release ended the lease, which
// Unlock then reports as lost.
func (g *grant) confirmRelease(ctx context.Context, err error) error {
	ctx, cancel := context.WithTimeout(ctx, g.validity+confirmPause)
	defer cancel()
	for i := 0; ; i++ {
		if g.d.conn.SessionID() != g.sid {
			return fmt.Errorf("%w (the session ended before the release was confirmed: its node is gone with it)", err)
		}
		if backoff(ctx, i, g.validity/10) != nil {
			return err
		}
		again := g.remove(ctx, -1)
		if g.d.conn.SessionID() != g.sid {
			continue // answered on another session: proves nothing
		}
		switch {
		case again == nil, errors.Is(again, zk.ErrNoNode):
			return nil
		case !transient(again):
			return again
		}
		err = again
	}
}

// remove releases the node at data version version (-1: any): with the
// release transaction, or with a plain delete when no waiter needs the
// transaction's mark (last: see attempt.take). A multi is all or nothing,
// so when it fails nothing was written: if the node is gone, ErrNoNode; if
// its version is not version, ErrBadVersion; if the node's ACL
// (Options.ACL) does not let us write to it, a plain delete, which only
// costs the waiter behind a listing.
func (g *grant) remove(ctx context.Context, version int32) error {
	if g.mark != "" {
		return g.removeMarked(ctx, version)
	}
	d := g.d
	sent := time.Now()
	var err error
	if !g.last {
		err = call0(ctx, nil, g.validity, func() error {
			_, err := d.conn.Multi(
				&zk.SetDataRequest{Path: g.path, Data: nil, Version: version},
				&zk.DeleteRequest{Path: g.path, Version: -1},
			)
			return err
		})
	}
	if g.last && g.dropKey && !g.joined.Load() {
		err = g.removeWithKey(ctx, version)
		if errors.Is(err, zk.ErrNotEmpty) || errors.Is(err, zk.ErrNoAuth) {
			// Somebody queued, or a lock-delay mark was made, since the
			// grant; or we may not delete the key node. The multi wrote
			// nothing: delete our node alone. The key is in use by others
			// (or not ours to delete): its next lone holders of this
			// Client leave its node be.
			g.joined.Store(true)
			d.setKeep(g.path[:strings.LastIndexByte(g.path, '/')])
			sent = time.Now()
			err = call0(ctx, nil, g.validity, func() error { return d.conn.Delete(g.path, version) })
		}
	} else if g.last || errors.Is(err, zk.ErrNoAuth) {
		sent = time.Now()
		err = call0(ctx, nil, g.validity, func() error { return d.conn.Delete(g.path, version) })
	}
	if err == nil {
		// Answered, and through the leader: the session was alive after
		// sent, which spares the Client's next hand-off a request (see
		// attempt.grantFrom).
		d.noteViaLeader(g.sid, sent)
	}
	return err
}

// removeWithKey deletes the node at version version (-1: any) and the key
// node, in one transaction: the release of a lock granted alone in its
// queue (see attempt.take), which leaves nothing for the server's container
// reaper. ZooKeeper deletes a node only when it has no children, so the
// key node's delete fails (ErrNotEmpty) when anybody joined the queue or
// made a lock-delay mark since the grant, and then, a multi being all or
// nothing, nothing is deleted. A retry after a lost reply fails at our
// node's delete (ErrNoNode) once the first was applied, and so never
// deletes a key node that another Client has made again since.
func (g *grant) removeWithKey(ctx context.Context, version int32) error {
	d := g.d
	keyPath := g.path[:strings.LastIndexByte(g.path, '/')]
	err := call0(ctx, nil, g.validity, func() error {
		_, err := d.conn.Multi(
			&zk.DeleteRequest{Path: g.path, Version: version},
			&zk.DeleteRequest{Path: keyPath, Version: -1},
		)
		return err
	})
	if err == nil {
		d.setGone(keyPath)
	}
	return err
}

// Abandon implements driver.Abandoner: dlock's Client.Close leaves a lease
// in its minimum hold to expire instead of releasing it. A ZooKeeper node
// expires only with its session. When the driver closes the connection,
// for a Client of Open, that ends the session and the server deletes the
// node; on a connection given to New, the caller's session may live for
// ever, so the node is removed here, as Release does, and the minimum hold
// ends with Close on both (see dlock.HoldAtLeast).
func (g *grant) Abandon(ctx context.Context) error {
	if g.d.closeConn != nil {
		g.cancel() // stop watching; closing the connection deletes the node
		return nil
	}
	if err := g.Release(ctx); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		return err
	}
	return nil
}

var _ driver.Abandoner = (*grant)(nil)

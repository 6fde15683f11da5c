package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// A lease can end while its node lives on. dlock's lease engine ends a lease
// at its local deadline when no renewal has succeeded by then, as during a
// connection outage; the server deletes the node only when the session
// expires. An outage shorter than the session timeout, which the reconnect
// survives with the session, leaves the node of a lease that is over: it
// still holds the key, nobody else is granted it, and the same Client's
// next call on the key waits behind it, for as long as the session lives.
// A Release (Unlock, Client.Close) deletes it, but a program that sees its
// lease lost need not call Unlock.
//
// So the grant gives its node up by itself (onForfeit) once a session
// timeout has passed since its last successful renewal returned, and
// deletes it when the connection is back (dropStale). That is safe:
//
//   - The lease is over by then. The engine counts its deadline from the
//     start of a renewal, or from the moment the grant was made, less a
//     margin, and only a Renew that returned nil moves it; provedAt is
//     later than either, and a session timeout is more than the engine
//     counts. Once forfeited is set no Renew returns nil (proved), so the
//     engine cannot extend a lease whose node is being deleted; and Done
//     is closed, or found closed by whoever looks, before the delete can
//     let anybody else in. The delete comes no earlier than the server
//     could itself have expired the session and given the key away: it
//     asks no more of the engine's deadline timer than an expiry does.
//   - Only this grant's node goes: its path names this Lock call's owner
//     (128 random bits, one node after the grant), and the delete is the
//     release transaction with the node's data version as the grant left
//     it (any, for an election's leader, which rewrites its own node), so
//     a node written by anybody else since, a hand-over to the waiter
//     behind, stays.
//   - A node whose session expired meanwhile is gone with it: the loop
//     stops when the Conn's session is no longer the grant's, or the node
//     is gone. Its retries are bounded by the session's life, and by
//     Close, which gives a janitor one session timeout on a connection
//     given to New and ends the session of one made by Open.
//   - Release and Abandon own the node once called: the janitor stops.
//
// The release transaction writes the node before deleting it, which tells
// the waiter behind that the holder let go (see Release): it did.

// onForfeit runs when the session timeout may have passed since the last
// successful renewal, and sets the timer again if a renewal succeeded
// since.
func (g *grant) onForfeit() {
	g.lifeMu.Lock()
	if g.ctx.Err() != nil || g.gone {
		g.lifeMu.Unlock()
		return // released or abandoned, or the node is not ours to remove
	}
	if left := time.Until(g.provedAt.Add(g.validity)); left > 0 {
		g.forfeit.Reset(left)
		g.lifeMu.Unlock()
		return
	}
	g.forfeited = true
	g.lifeMu.Unlock()
	// The engine has ended the lease already; this lets it stop waiting
	// on Lost.
	g.send(g.forfeitErr())
	g.d.goJanitor(func(ctx context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(g.ctx, cancel)()
		g.dropStale(ctx)
		g.endMark(ctx)
	})
}

// proved records that a renewal succeeded now. It reports false once the
// grant has been forfeited: the renewal must then fail.
func (g *grant) proved() bool {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	if g.forfeited {
		return false
	}
	g.provedAt = time.Now()
	return true
}

func (g *grant) forfeitErr() error {
	return fmt.Errorf("lock node %s not renewed within the session timeout %v; given up, to be deleted once the connection is back", g.nodeName(), g.validity)
}

// dropStale deletes the node of a forfeited grant, retrying transient
// failures while the grant's session lives and ctx lasts.
func (g *grant) dropStale(ctx context.Context) {
	for i := 0; ; i++ {
		if g.d.conn.SessionID() != g.sid {
			return // the session ended, and the server deleted the node with it
		}
		err := g.remove(ctx, g.checkVersion())
		switch {
		case err == nil, errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion):
			return // deleted; gone already; written by somebody else
		case !transient(err):
			return // ctx ended, the Conn closed, or no permission: a retry changes nothing
		}
		if backoff(ctx, i, g.validity/2) != nil {
			return
		}
	}
}

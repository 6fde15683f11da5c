package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/lease"
	"github.com/go-zookeeper/zk"
)

// Acquire implements driver.Driver with Curator's InterProcessMutex recipe;
// see attempt.run.
func (d *zkDriver) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	if !validOwner(req.Owner) {
		return nil, fmt.Errorf("zkdlock: owner %q is not a hex string", req.Owner)
	}
	a := &attempt{d: d, req: req, keyPath: d.keyPath(req.Key), prefix: nodePrefix(req.Owner)}
	g, err := a.run(ctx)
	if err != nil {
		if !a.clean {
			a.cleanup(ctx)
		}
		return nil, err
	}
	return g, nil
}

// attempt is one Acquire call.
type attempt struct {
	d       *zkDriver
	req     *driver.AcquireRequest
	keyPath string
	prefix  string // of this attempt's node name: "lock-<owner>-"

	// creates counts Create requests that may still act on the server,
	// including those run gave up waiting for.
	creates sync.WaitGroup
	// syncFirst is set after a request failed on a broken connection:
	// the next listing is preceded by a sync, so that it reflects whatever
	// that request did on the server.
	syncFirst bool

	// me is this attempt's node, once known: from a create that answered,
	// or found by its owner in a listing.
	me     lockNode
	haveMe bool
	// sid and czxid, when czxid is not 0, are the session that owns me and
	// its creation zxid (the fencing token), learnt from the create or
	// from the watch on me.
	sid   int64
	czxid int64
	// own, when not nil, fires when me is deleted or the session ends: an
	// exists watch on me, or (uncontended) a child watch on the key node.
	own      <-chan zk.Event
	ownChild bool // own is the child watch
	// unsure is set when a create failed without an answer (or its reply
	// was lost): it may have made a node, which only a listing can find.
	unsure bool
	// clean is set when no node of this attempt is left and no create can
	// still make one: cleanup has nothing to do.
	clean bool
	// created counts the creates sent. With one, answered, the attempt
	// knows its only possible node.
	created int

	fails     int       // consecutive transient failures
	failSince time.Time // when the first of them happened
}

// run queues the attempt and waits for its turn:
//
//  1. Create our node (ephemeral, sequential, named after the owner) in a
//     multi with a setData on the key node: both take the transaction's
//     zxid, so the key node's new Stat gives our node's creation zxid, the
//     fencing token. If the key node does not exist, create it first.
//  2. List the key node's children, sorted by sequence, and in the same
//     round trip (go-zookeeper pipelines concurrent requests) set an
//     exists watch on our node; when the last attempt of this Client on
//     this key found it free, set a child watch with the listing instead.
//  3. Our node is first: the key is ours.
//  4. Otherwise TryLock deletes its node and gives up (so it never barges
//     past a waiter); Lock watches the node just before ours (only that
//     one: a release wakes one waiter, not the herd) and waits.
//  5. When that node was a holder that released (its data was written:
//     only a release does that, see grant.Release), or it is deleted and
//     it was first in our listing, our node is first now (sequence numbers
//     only grow, and our own watch has not fired): the key is ours without
//     another request. Any other event (a waiter ahead of us left) goes
//     back to 2.
//
// A lost create reply or a session expiry is recovered by listing: the
// listing finds the node by its owner, or finds none and queues again.
func (a *attempt) run(ctx context.Context) (*grant, error) {
	for {
		if !a.haveMe && !a.unsure {
			err := a.create(ctx)
			if err != nil {
				if errors.Is(err, zk.ErrNoNode) {
					// The key node does not exist (yet, or any more: the
					// server deletes empty containers).
					if err := a.ensureKeyNode(ctx); err != nil {
						if err := a.retry(ctx, "create the key node", err); err != nil {
							return nil, err
						}
					}
					continue
				}
				if err := a.retry(ctx, "create a lock node", err); err != nil {
					return nil, err
				}
				continue
			}
			a.fails = 0
		}

		q, listSent, err := a.listAndWatch(ctx)
		if errors.Is(err, zk.ErrNoNode) {
			a.forget() // no key node, so no node of ours: create one
			continue
		}
		if err != nil {
			if err := a.retry(ctx, "list the queue", err); err != nil {
				return nil, err
			}
			continue
		}
		if !a.haveMe && !a.unsure {
			continue // the watch found our node gone: queue again
		}
		mine, err := a.findMine(ctx, q)
		if err != nil {
			return nil, err
		}
		if mine < 0 {
			// Our node is gone (its session expired, or an operator
			// deleted it), or a create whose reply was lost made none:
			// queue again, at the end.
			a.forget()
			continue
		}
		a.d.setFree(a.keyPath, len(q) == 1)
		if mine != 0 && a.ownChild {
			// A child watch fires on every join: not for a waiter. It
			// fires once more and is gone.
			a.own, a.ownChild = nil, false
		}
		if a.czxid == 0 {
			// A node adopted after a lost create reply: its Stat says
			// whose it is.
			if err := a.watchOwn(ctx); err != nil {
				if err := a.retry(ctx, "watch "+a.me.name, err); err != nil {
					return nil, err
				}
			}
			continue // list again: the node may have moved up meanwhile
		}
		a.fails = 0

		switch {
		case mine == 0:
			if a.own == nil {
				if err := a.watchOwn(ctx); err != nil {
					if err := a.retry(ctx, "watch "+a.me.name, err); err != nil {
						return nil, err
					}
				}
				continue
			}
			g, err := a.grant(ctx, listSent)
			if err != nil {
				if err := a.retry(ctx, "read "+a.me.name, err); err != nil {
					return nil, err
				}
				continue
			}
			if g != nil {
				return g, nil
			}
		case !a.req.Wait:
			// Not first: leave, without having made anybody wait.
			err := a.deleteNode(ctx, a.me.name)
			if err == nil {
				a.forget()
				a.clean = a.created == 1 // else an earlier create may yet land
			}
			return nil, a.locked(q)
		default:
			pred := q[mine-1]
			g, err := a.waitFor(ctx, pred, mine == 1)
			if err != nil {
				if err := a.retry(ctx, "watch "+pred.name, err); err != nil {
					return nil, err
				}
				continue
			}
			if g != nil {
				return g, nil
			}
		}
	}
}

func (a *attempt) locked(q []lockNode) error {
	// q has the holder and this attempt's node; the rest wait.
	if waiting := len(q) - 2; waiting > 0 {
		return fmt.Errorf("%w: %d waiting", driver.ErrLocked, waiting)
	}
	return driver.ErrLocked
}

// forget drops what the attempt knew of its node.
func (a *attempt) forget() {
	a.haveMe, a.unsure, a.own, a.ownChild, a.sid, a.czxid = false, false, nil, false, 0, 0
}

// callTimeout is how long one request may go unanswered before the attempt
// stops waiting for it. A waiting Lock waits for every answer: go-zookeeper
// answers every request (or fails it when the connection breaks, after two
// thirds of the session timeout of silence), so a slow server only makes it
// slower, never fail. TryLock gives up after a session timeout.
func (a *attempt) callTimeout() time.Duration {
	if a.req.Wait {
		return 0
	}
	return a.d.timeout()
}

// listAndWatch returns the queue of the key, and the moment the listing was
// sent. When our node is known and not watched yet, it sets the watch on it
// in the same round trip: an exists watch, or a child watch on the key node
// set by the listing itself when the key was free last time.
func (a *attempt) listAndWatch(ctx context.Context) ([]lockNode, time.Time, error) {
	d := a.d
	if a.syncFirst {
		// Sync: bring the server we talk to up to date with the leader, so
		// that the listing sees a Create whose reply was lost. ZooKeeper
		// rejects, as "session moved", requests that a previous server
		// forwards after the session moved, so nothing older can land later.
		sid, sent := d.conn.SessionID(), time.Now()
		err := call0(ctx, nil, a.callTimeout(), func() error {
			_, err := d.conn.Sync(a.keyPath)
			return err
		})
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, time.Time{}, err
		}
		if err == nil {
			d.noteViaLeader(sid, sent)
		}
		a.syncFirst = false
	}
	childWatch := a.haveMe && a.own == nil && a.czxid != 0 && d.wasFree(a.keyPath)
	var watched chan error
	if a.haveMe && a.own == nil && !childWatch {
		watched = make(chan error, 1)
		go func() { watched <- a.watchOwn(ctx) }()
	}
	var (
		q    []lockNode
		sent time.Time
		sid  int64
		err  error
	)
	if childWatch {
		// getChildren with a watch, our own: the watch is this attempt's.
		sent, sid = time.Now(), d.conn.SessionID()
		var r childrenW
		r, err = call(ctx, nil, a.callTimeout(), func() (childrenW, error) {
			children, _, ch, err := d.conn.ChildrenW(a.keyPath)
			return childrenW{children, ch}, err
		})
		if err == nil {
			q = queue(r.children)
			if sid == a.sid && d.conn.SessionID() == sid {
				// Fires when any child of the key node changes, our
				// node's deletion included, and when the session ends.
				a.own, a.ownChild = r.ch, true
			}
		}
	} else {
		// getChildren, shared with the Client's other attempts on the key
		// that ask meanwhile (see listing).
		var l *listing
		l, err = d.listQueue(ctx, a.keyPath, a.callTimeout())
		if err == nil {
			q, sent, sid = l.q, l.sent, l.sid
		}
	}
	if watched != nil {
		if werr := <-watched; werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	d.noteAlive(sid, sent)
	return q, sent, nil
}

type childrenW struct {
	children []string
	ch       <-chan zk.Event
}

// findMine returns the index of our node in q, or -1. It adopts the first
// node of ours when a create's reply was lost, and removes any other.
func (a *attempt) findMine(ctx context.Context, q []lockNode) (int, error) {
	mine := -1
	for i, n := range q {
		if n.owner != a.req.Owner {
			continue
		}
		if mine < 0 && (!a.haveMe || n.name == a.me.name) {
			mine = i
			continue
		}
		// A second node of ours can only come from a create that was
		// retried in a way ZooKeeper's ordering should prevent; keep the
		// earlier place and remove the other.
		for {
			err := a.deleteNode(ctx, n.name)
			if err == nil {
				break
			}
			if err := a.retry(ctx, "delete "+n.name, err); err != nil {
				return -1, err
			}
		}
	}
	if mine >= 0 && !a.haveMe {
		a.forget()
		a.me, a.haveMe = q[mine], true
	}
	a.unsure = false
	return mine, nil
}

// ensureKeyNode creates the key's node as a container, so that the server
// deletes it once its last child is gone, and the root if that is missing.
func (a *attempt) ensureKeyNode(ctx context.Context) error {
	d := a.d
	_, err := call(ctx, nil, a.callTimeout(), func() (string, error) {
		return d.conn.CreateContainer(a.keyPath, nil, zk.FlagContainer, d.acl)
	})
	switch {
	case err == nil, errors.Is(err, zk.ErrNodeExists):
		return nil
	case errors.Is(err, zk.ErrNoNode):
		// The root is gone (an operator deleted it): recreate it.
		return d.ensurePath(ctx, d.root)
	}
	return err
}

// create adds this attempt's node to the queue, in a multi with a setData
// on the key node: one transaction, one zxid, so the key node's Stat in the
// reply gives the new node's creation zxid. The request is counted in
// a.creates until it completes, even when ctx ends first. A create that
// fails for any reason but a missing key node may have made a node: the
// next listing looks for it.
func (a *attempt) create(ctx context.Context) error {
	d := a.d
	sid := d.conn.SessionID()
	a.created++
	sent := time.Now()
	// create -e -s: ZooKeeper appends the sequence number to the name.
	rs, err := call(ctx, &a.creates, a.callTimeout(), func() ([]zk.MultiResponse, error) {
		return d.conn.Multi(
			&zk.CreateRequest{Path: a.keyPath + "/" + a.prefix, Data: a.req.Metadata, Acl: d.acl, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: a.keyPath, Data: nil, Version: -1},
		)
	})
	if err == nil && (len(rs) != 2 || rs[0].Error != nil || rs[1].Error != nil || rs[1].Stat == nil) {
		err = fmt.Errorf("unexpected reply to a multi: %+v", rs)
	}
	if err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			a.created-- // answered: no key node, so no node made
		} else {
			a.unsure = true
		}
		return err
	}
	path := rs[0].String
	n, ok := parseLockNode(path[strings.LastIndex(path, "/")+1:])
	if !ok {
		a.unsure = true
		return fmt.Errorf("create returned %q, not a lock node", path)
	}
	a.forget()
	a.me, a.haveMe = n, true
	if sid != 0 && d.conn.SessionID() == sid {
		// Answered on the session it was sent on (session ids never come
		// back): the node is that session's.
		a.sid, a.czxid = sid, rs[1].Stat.Mzxid
		// A write, so it went through the leader (see heard).
		d.noteViaLeader(sid, sent)
	}
	return nil
}

// watchOwn sets an exists watch on our node. Its Stat gives the fencing
// token and the owner session, which must be the Client's current one. A
// node that turns out to be gone, or left by a session that has ended, is
// forgotten (and in the second case removed), so that run queues again.
func (a *attempt) watchOwn(ctx context.Context) error {
	d := a.d
	path := a.keyPath + "/" + a.me.name
	sid := d.conn.SessionID()
	sent := time.Now()
	r, err := call(ctx, nil, a.callTimeout(), func() (existsW, error) {
		ok, stat, ch, err := d.conn.ExistsW(path)
		return existsW{ok, stat, ch}, err
	})
	if err != nil {
		return err
	}
	if !r.ok {
		// Gone. The exists watch now waits for a creation that will
		// never come; it ends with the session.
		a.forget()
		return nil
	}
	if sid == 0 || r.stat.EphemeralOwner != sid || d.conn.SessionID() != sid {
		// Ours by name but not by session: a node of a session that has
		// expired, seen by a server that has not caught up. Remove it (it
		// is going anyway) and queue again.
		if err := a.deleteNode(ctx, a.me.name); err != nil && isCtxErr(err) {
			return err
		}
		a.forget()
		a.syncFirst = true
		return nil
	}
	d.noteAlive(sid, sent)
	a.sid, a.czxid, a.own, a.ownChild = sid, r.stat.Czxid, r.ch, false
	return nil
}

type existsW struct {
	ok   bool
	stat *zk.Stat
	ch   <-chan zk.Event
}

// ownFired reports whether the watch on our node has fired, and if so
// drops it.
func (a *attempt) ownFired() bool {
	select {
	case ev := <-a.own:
		a.ownEvent(ev)
		return true
	default:
		return false
	}
}

// ownEvent handles a notification of the watch on our node: the listing
// will tell whether the node is still there.
func (a *attempt) ownEvent(ev zk.Event) {
	if ev.Type == zk.EventNodeDeleted || ev.Type == zk.EventNotWatching {
		a.syncFirst = true
	}
	a.own, a.ownChild = nil, false
}

// grant makes the grant of our node, which heads the queue as of a
// listing sent at listSent. It returns nil when the node's watch fired or
// the session changed since it was set: run then looks again.
func (a *attempt) grant(ctx context.Context, listSent time.Time) (*grant, error) {
	if a.ownFired() || a.d.conn.SessionID() != a.sid {
		return nil, nil
	}
	// The server answered the listing, so the session was alive after it
	// was sent.
	return a.grantFrom(ctx, listSent)
}

// grantFrom makes the grant of our node, known to be first, given a moment
// after which the server is known to have heard from the session. The
// grant's ValidFrom must be such a moment; the latest known is the last
// answered request of this session. On a server stated standalone, if
// even that is more than a third of the session timeout ago (a long wait
// on an idle Client, or a slow server), one exists on our node renews the
// proof, and checks the node once more; nil, nil means it is gone.
// Otherwise (an ensemble, or a server found standalone) the lease counts
// from what the server that expires the session is known to have heard
// (see heard and proveHeard).
func (a *attempt) grantFrom(ctx context.Context, validFrom time.Time) (*grant, error) {
	d := a.d
	sid := a.sid
	if t, ok := d.aliveSince(sid); ok && t.After(validFrom) {
		validFrom = t
	}
	if d.lag() > 0 {
		synced, ok, err := a.proveHeard(ctx)
		if err != nil || !ok {
			return nil, err
		}
		if synced.After(validFrom) {
			validFrom = synced
		}
	} else if time.Since(validFrom) > d.timeout()/3 {
		path := a.keyPath + "/" + a.me.name
		sent := time.Now()
		r, err := call(ctx, nil, a.callTimeout(), func() (existsW, error) {
			ok, stat, err := d.conn.Exists(path)
			return existsW{ok: ok, stat: stat}, err
		})
		if err != nil {
			return nil, err
		}
		if !r.ok || r.stat.EphemeralOwner != sid || d.conn.SessionID() != sid {
			a.syncFirst = true
			return nil, nil // the listing will tell
		}
		d.noteAlive(sid, sent)
		validFrom = sent
	}
	return newGrant(d, a.req.Key, a.keyPath+"/"+a.me.name, sid, a.czxid, validFrom, a.own), nil
}

// proveHeard makes sure, before a grant, that the leader is known to have
// heard from the session recently enough for the lease to live until its
// first renewal: the lease counts from that moment (grant.HeardFrom), and
// the engine renews a third of the session timeout before the deadline at
// the latest, so the moment must leave at least that much (with the
// engine's margins). An uncontended Lock has its proof already, mostly: a
// fresh session's handshake, or the session's pings, which the create (a
// write through the leader) proves reported. A waiter that waited long on
// an otherwise idle Client sends a sync, which proves the pings (or the
// waiter's own requests) answered half a tick and more before it; when the
// Client saw nothing answered in that window (a Client made with New,
// which cannot see the pings), it waits until the sync it just sent can be
// proved and sends another. While the Client makes the standalone check
// (Detect, see checkStandalone), the check takes the place of the sync and
// proves itself: one request, no wait. It returns when the last sync (or
// check) was sent (zero if none was), and ok false when the node or the
// session was lost meanwhile (the listing will tell).
func (a *attempt) proveHeard(ctx context.Context) (synced time.Time, ok bool, err error) {
	d := a.d
	sid := a.sid
	for i := 0; ; i++ {
		if from, known := d.heard.since(sid); known {
			safe := d.timeout() - time.Duration(float64(d.timeout())*lease.DriftFactor) - lease.DriftMargin
			if from.Add(safe - d.timeout()/3).After(time.Now()) {
				return synced, true, nil
			}
		}
		if i == 2 {
			// A sync proves the one lag before it (the lag is at most 9/32
			// of the timeout): only a slow server gets here. The lease
			// counts from what is known, however short.
			return synced, true, nil
		}
		if i == 1 {
			// Nothing answered long enough ago: wait until the sync just
			// sent can be proved.
			if _, answered, known := d.heard.last(sid); known {
				wait := time.NewTimer(time.Until(d.heard.provableAt(answered)))
				select {
				case <-wait.C:
				case <-ctx.Done():
					wait.Stop()
					return time.Time{}, false, ctx.Err()
				}
			}
		}
		// The standalone check, while the server answers it empty: it
		// proves its own send time.
		sent, proved, err := d.checkStandalone(ctx, a.callTimeout())
		if err != nil {
			return time.Time{}, false, err
		}
		if !proved {
			sent = time.Now()
			// sync: through the leader, after the follower's ping replies.
			if err := call0(ctx, nil, a.callTimeout(), func() error {
				_, err := d.conn.Sync(a.keyPath)
				return err
			}); err != nil {
				return time.Time{}, false, err
			}
			d.noteViaLeader(sid, sent)
		}
		synced = sent
		// Our node is still there: had it been deleted before the sync (or
		// the check) was answered, its watch would have fired first.
		if a.ownFired() || d.conn.SessionID() != sid {
			a.syncFirst = true
			return time.Time{}, false, nil
		}
	}
}

// waitFor watches pred, the node just before ours, and waits until it
// changes or goes away, our own node's watch fires, or ctx ends. When the
// event proves that our node is first now (predReleased: pred was a holder
// that released, or the head of the queue and is gone), waitFor returns
// the grant without another request. Otherwise it returns nil, nil, and
// run lists again. If our node is not watched yet, it sets that watch too,
// in the same round trip.
func (a *attempt) waitFor(ctx context.Context, pred lockNode, predFirst bool) (*grant, error) {
	d := a.d
	path := a.keyPath + "/" + pred.name
	var watched chan error
	if a.own == nil {
		watched = make(chan error, 1)
		go func() { watched <- a.watchOwn(ctx) }()
	}
	sid := d.conn.SessionID()
	sent := time.Now()
	// getData with a watch, not exists: on a node that is already gone,
	// exists would leave a watch behind for a name nobody will create again
	// (Curator avoids it the same way).
	ch, err := call(ctx, nil, a.callTimeout(), func() (<-chan zk.Event, error) {
		_, _, ch, err := d.conn.GetW(path)
		return ch, err
	})
	if watched != nil {
		werr := <-watched
		if werr != nil {
			return nil, werr
		}
		if a.own == nil {
			return nil, nil // our node is gone: queue again
		}
	}
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil // it went between the listing and the watch: look again
	}
	if err != nil {
		return nil, err
	}
	d.noteAlive(sid, sent)
	select {
	case ev := <-ch:
		if !predReleased(ev, predFirst) {
			// A waiter ahead of us left, or the session ended: the
			// listing says what to do next.
			return nil, nil
		}
		// Ours is first now — if it still exists: ZooKeeper sends a
		// session its notifications in order, and go-zookeeper hands
		// them out in that order, so had our node been deleted before
		// pred, its watch would have fired already.
		if a.ownFired() {
			return nil, nil
		}
		return a.handOff(ctx)
	case ev := <-a.own:
		a.ownEvent(ev)
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// predReleased reports whether an event of the watch on pred, the node
// just before ours in a listing made after our create, proves that our
// node is first now:
//
//   - EventNodeDataChanged: only a releasing holder writes to a lock node
//     (see grant.Release: a setData and the delete in one transaction), so
//     pred held the key. When it was granted, every node before it was
//     gone; none with a lower sequence can appear later (sequence numbers
//     only grow, and the key node cannot be reaped and recreated while our
//     node is in it); and none between pred and ours was left at our
//     listing. So nothing is before ours. A reconnect cannot fake it:
//     go-zookeeper sets the watch again with the last zxid it saw, which
//     is at least pred's creation (the listing showed pred), and the
//     server reports a data change only for a later write, and a deletion
//     for a node that is gone.
//   - EventNodeDeleted when pred was first in that listing: every node
//     before ours was in the listing, and only pred was.
//
// EventNodeDeleted of a node further back (a waiter that gave up, an
// expired session, an operator, or a holder that released with a plain
// delete, as older versions and Release without write permission do) says
// nothing about the nodes before it: the listing must look.
func predReleased(ev zk.Event, predFirst bool) bool {
	switch ev.Type {
	case zk.EventNodeDataChanged:
		return true
	case zk.EventNodeDeleted:
		return predFirst
	}
	return false
}

// handOff makes the grant of a waiter whose predecessor released the key
// or, being the head of the queue, was deleted, without listing again (see
// grantFrom for its ValidFrom).
func (a *attempt) handOff(ctx context.Context) (*grant, error) {
	if a.d.conn.SessionID() != a.sid {
		return nil, nil
	}
	return a.grantFrom(ctx, time.Time{})
}

func (a *attempt) deleteNode(ctx context.Context, name string) error {
	return a.deleteNodeWithin(ctx, name, a.callTimeout())
}

func (a *attempt) deleteNodeWithin(ctx context.Context, name string, timeout time.Duration) error {
	d := a.d
	err := call0(ctx, nil, timeout, func() error { return d.conn.Delete(a.keyPath+"/"+name, -1) })
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// retry decides what to do after a failed request: give up with a wrapped
// error if it is permanent or if ctx has ended; otherwise pause briefly and
// return nil so that run tries again. A transient error (a broken
// connection, no server, an expired session) never ends a waiting Lock: it
// keeps its place while the session lives, queues again if the session
// expired, and only ctx (or Client.Close) ends it; a slow server does not
// either, since a waiting Lock waits for every answer. TryLock gives up
// after a whole session timeout of failures: by then the session has
// either come back or expired, and the ensemble is unavailable to us.
func (a *attempt) retry(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The caller gave up (or Close did): which step the wait was at
		// is no news to them, and varies from one run to the next.
		return err
	}
	if !transient(err) {
		return a.d.wrapErr(op, err)
	}
	a.syncFirst = true
	now := time.Now()
	if a.fails == 0 {
		a.failSince = now
	}
	a.fails++
	if failing := now.Sub(a.failSince); failing >= a.d.timeout() && !a.req.Wait {
		return a.d.wrapErr(fmt.Sprintf("%s (no success for %v)", op, failing.Round(time.Millisecond)), err)
	}
	if err := backoff(ctx, a.fails, a.d.timeout()/10); err != nil {
		return err // only ctx ends a backoff
	}
	return nil
}

// cleanup removes every node this attempt may have created, after it failed
// or was cancelled, before Acquire returns: the next waiter must not wait
// behind a caller that went away. It first lets Creates still in flight
// complete (they may yet create a node), then lists the key node and deletes
// the nodes named after this owner. Both steps are bounded by a session
// timeout each; what cannot be done by then (the server is unreachable) is
// left to a janitor that keeps trying until it succeeds or the driver is
// closed. If the session expires meanwhile, the server deletes the nodes
// itself.
func (a *attempt) cleanup(ctx context.Context) {
	settled := make(chan struct{})
	go func() {
		a.creates.Wait()
		close(settled)
	}()
	ctx = context.WithoutCancel(ctx)
	if a.haveMe && !a.unsure && a.created == 1 {
		// The one create answered: the only node of ours is a.me.
		if err := a.deleteNodeWithin(ctx, a.me.name, a.d.timeout()); err == nil {
			return
		}
	}
	if a.removeAll(ctx, settled, a.d.timeout()) {
		return
	}
	a.d.goJanitor(func(ctx context.Context) {
		for i := 0; ; i++ {
			if a.removeAll(ctx, settled, a.d.timeout()) {
				return
			}
			if backoff(ctx, i, a.d.timeout()/2) != nil {
				return
			}
		}
	})
}

// removeAll waits up to limit for settled, then deletes the attempt's nodes.
// It reports true when the creates had settled and no node is left.
func (a *attempt) removeAll(ctx context.Context, settled <-chan struct{}, limit time.Duration) bool {
	ok := true
	t := time.NewTimer(limit)
	select {
	case <-settled:
	case <-t.C:
		ok = false // delete what is there now, and come back
	case <-ctx.Done():
		t.Stop()
		return false
	}
	t.Stop()
	d := a.d
	children, err := call(ctx, nil, d.timeout(), func() ([]string, error) {
		children, _, err := d.conn.Children(a.keyPath)
		return children, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return ok
	}
	if err != nil {
		return false
	}
	for _, n := range queue(children) {
		if n.owner == a.req.Owner {
			if err := a.deleteNodeWithin(ctx, n.name, d.timeout()); err != nil {
				ok = false
			}
		}
	}
	return ok
}

package zkdlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlockdev/dlock/driver"
	planner "github.com/dlockdev/dlock/driver/queue"
	"github.com/go-zookeeper/zk"
)

// list is stepList: list the queue (setting the watches the next steps
// need) and look for our node in it.
func (a *attempt) list(ctx context.Context) error {
	q, es, ms, listSent, err := a.listAndWatch(ctx)
	if errors.Is(err, zk.ErrNoNode) {
		a.forget() // no key node, so no node of ours: create one
		return nil
	}
	if err != nil {
		return a.retry(ctx, "list the queue", err)
	}
	if a.node == nodeNone {
		a.forget() // the watch found our node gone: queue again
		return nil
	}
	a.q, a.es, a.marks, a.listSent, a.step = q, es, ms, listSent, stepPlace
	return nil
}

// ownWhileWaiting reports whether the attempt's node is watched while it
// waits: by the modes whose waits can end without a listing (see
// plan.shortcut), which must know then that their node still exists. A
// semaphore's later waiter lists the queue at every event, which tells;
// its first waiters watch their node with the holders (see waitAny).
func (a *attempt) ownWhileWaiting() bool {
	return a.req.Mode == driver.Exclusive || a.req.Limit == 0
}

// listAndWatch returns the queue of the key, its entries for the planner,
// and the moment the listing was sent. When our node is known and not
// watched yet, it sets the watch on it in the same round trip: an exists
// watch, or a child watch on the key node set by the listing itself when
// the key was free last time.
func (a *attempt) listAndWatch(ctx context.Context) ([]lockNode, []planner.Entry, []mark, time.Time, error) {
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
			return nil, nil, nil, time.Time{}, err
		}
		if err == nil {
			d.noteViaLeader(sid, sent)
		}
		a.syncFirst = false
	}
	// A child watch when the key was free last time: it is then the
	// lease's watch, for one request less.
	childWatch := a.node == nodeKnown && a.own == nil && d.wasFree(a.keyPath)
	var watch *ownWatch
	if a.node == nodeKnown && a.own == nil && !childWatch && a.ownWhileWaiting() {
		w := a.startWatchOwn()
		watch = &w
	}
	var (
		q    []lockNode
		es   []planner.Entry
		ms   []mark
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
			// A listing of our own, read by this attempt only: a free
			// key's fits the attempt's buffers.
			if len(r.children) <= len(a.qBuf) {
				q = queueInto(a.qBuf[:0], r.children)
				es = entriesInto(a.esBuf[:0], q)
			} else {
				q = queue(r.children)
				es = entries(q)
			}
			ms = marks(r.children)
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
			q, es, ms, sent, sid = l.q, l.es, l.ms, l.sent, l.sid
		}
	}
	if watch != nil {
		if werr := a.ownWatched(ctx, *watch); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return nil, nil, nil, time.Time{}, err
	}
	d.noteAlive(sid, sent)
	return q, es, ms, sent, nil
}

type childrenW struct {
	children []string
	ch       <-chan zk.Event
}

// findMine returns the index of our node in q, or -1. It adopts the first
// node of ours when a create's reply was lost (nodeUnsure becomes
// nodeAdopted, or nodeNone when there is none), and removes any other.
func (a *attempt) findMine(ctx context.Context, q []lockNode) (int, error) {
	mine := -1
	for i, n := range q {
		if n.owner != a.req.Owner {
			continue
		}
		if mine < 0 && (a.node == nodeUnsure || n.name == a.me.name) {
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
	if mine >= 0 && a.node == nodeUnsure {
		a.forget()
		a.me, a.node, a.step = q[mine], nodeAdopted, stepPlace
	}
	if mine < 0 {
		a.node = nodeNone
	}
	return mine, nil
}

// watchOwn sets an exists watch on our node. Its Stat gives the fencing
// token and the owner session, which must be the Client's current one. A
// node that turns out to be gone, or left by a session that has ended, is
// forgotten (and in the second case removed), so that run queues again.
func (a *attempt) watchOwn(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return a.ownWatched(ctx, a.startWatchOwn())
}

// ownWatch is watchOwn's request, sent by startWatchOwn beside another
// request for one round trip, and handled by ownWatched.
type ownWatch struct {
	sid   int64
	sent  time.Time
	reply *pending[existsW]
}

// startWatchOwn sends watchOwn's exists.
func (a *attempt) startWatchOwn() ownWatch {
	d := a.d
	path := a.mePath()
	w := ownWatch{sid: d.conn.SessionID(), sent: time.Now()}
	w.reply = startCall(nil, func() (existsW, error) {
		ok, stat, ch, err := d.conn.ExistsW(path)
		return existsW{ok, stat, ch}, err
	})
	return w
}

// ownWatched waits for the reply to w and does the rest of watchOwn.
func (a *attempt) ownWatched(ctx context.Context, w ownWatch) error {
	d := a.d
	sid := w.sid
	r, err := awaitCall(ctx, w.reply, a.callTimeout())
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
	d.noteAlive(sid, w.sent)
	a.node, a.sid, a.czxid, a.own, a.ownChild = nodeKnown, sid, r.stat.Czxid, r.ch, false
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

// wait is stepWait: wait as a.plan says. Any outcome but a grant lists
// again.
func (a *attempt) wait(ctx context.Context) (*grant, error) {
	if a.plan.Verdict == planner.WaitAny {
		return a.waitAny(ctx)
	}
	a.step = stepList
	g, err := a.waitFor(ctx, a.plan)
	if err != nil {
		return nil, a.retry(ctx, "watch "+a.plan.target.name, err)
	}
	return g, nil
}

// waitFor watches p.target, a node ahead of ours, and waits until it
// changes or goes away, our own node's watch fires, or ctx ends. When the
// event proves that our node is granted now (see plan.grants), waitFor
// returns the grant without another request. Otherwise it returns nil,
// nil, and run lists again. If our node should be watched and is not yet,
// it sets that watch too, in the same round trip.
func (a *attempt) waitFor(ctx context.Context, p plan) (*grant, error) {
	d := a.d
	path := a.keyPath + "/" + p.target.name
	var watch *ownWatch
	if a.own == nil && p.shortcut() {
		w := a.startWatchOwn()
		watch = &w
	}
	sid := d.conn.SessionID()
	sent := time.Now()
	// getData with a watch, not exists: on a node that is already gone,
	// exists would leave a watch behind for a name nobody will create again
	// (Curator avoids it the same way).
	r, err := call(ctx, nil, a.callTimeout(), func() (getW, error) {
		_, stat, ch, err := d.conn.GetW(path)
		return getW{stat: stat, ch: ch}, err
	})
	if watch != nil {
		if werr := a.ownWatched(ctx, *watch); werr != nil {
			return nil, werr
		}
		if a.own == nil {
			return nil, nil // our node is gone: queue again
		}
	}
	if errors.Is(err, zk.ErrNoNode) && (p.proven || p.Delete) {
		// Target is gone since our listing, which proves our grant as
		// its deletion's notification would (see plan): a candidate's
		// predecessor seen leading released, or its session ended; a
		// node at the head of the listing went. Ours is first — if it
		// still exists: ZooKeeper sends a session the notification of a
		// change before the reply to a later request, so had our node
		// gone first, its watch would have fired.
		if a.ownFired() {
			return nil, nil
		}
		return a.handOff(ctx)
	}
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil // it went between the listing and the watch: look again
	}
	if err != nil {
		return nil, err
	}
	d.noteAlive(sid, sent)
	if p.shortcut() {
		// The proof that the grant needs is kept fresh meanwhile, rather
		// than sent after the release (see keepFresh).
		d.beginWait()
		defer d.endWait()
	}
	// own is nil here when our node is not watched while we wait (a
	// semaphore's waiter): that case never fires.
	select {
	case ev := <-r.ch:
		if p.Publishes && ev.Type == zk.EventNodeDataChanged {
			// The leader ahead of us published, or released (a setData
			// and the delete in one transaction): it holds or held the
			// key. Read it again, with a new watch (see plan).
			a.plan.proven = true
			a.step = stepWait
			return nil, nil
		}
		if !p.grants(ev) {
			// A waiter ahead of us left, or the session ended: the
			// listing says what to do next.
			return nil, nil
		}
		// Ours is granted now — if it still exists: ZooKeeper sends a
		// session its notifications in order, and go-zookeeper hands
		// them out in that order, so had our node been deleted before
		// the target's event, its watch would have fired already.
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

// Why an event of plan.grants proves the grant (the lock's case; rule.go
// gives the others'), for the watch on pred, the node just before ours in
// a listing made after our create:
//
//   - EventNodeDataChanged: only a releasing holder writes to a lock's
//     node (see grant.Release: a setData and the delete in one
//     transaction), so pred held the key. When it was granted, every node
//     before it was gone; none with a lower sequence can appear later
//     (sequence numbers only grow, and the key node cannot be reaped and
//     recreated while our node is in it); and none between pred and ours
//     was left at our listing. So nothing is before ours. A reconnect
//     cannot fake it: go-zookeeper sets the watch again with the last zxid
//     it saw, which is at least pred's creation (the listing showed pred),
//     and the server reports a data change only for a later write, and a
//     deletion for a node that is gone.
//   - EventNodeDeleted when pred was first in that listing: every node
//     before ours was in the listing, and only pred was.
//
// EventNodeDeleted of a node further back (a waiter that gave up, an
// expired session, an operator, or a holder that released with a plain
// delete, as older versions and Release without write permission do) says
// nothing about the nodes before it: the listing must look.

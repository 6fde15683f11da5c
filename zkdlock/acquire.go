package zkdlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	planner "github.com/dlockdev/dlock/driver/queue"
	"github.com/go-zookeeper/zk"
)

// Acquire implements driver.Driver: one fair queue of ephemeral sequential
// nodes per key, whose names carry the entries' modes (Curator's
// InterProcessMutex recipe, extended to shared entries by the grant rule
// of rule.go); see attempt.run.
func (d *zkDriver) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	if !validOwner(req.Owner) {
		return nil, fmt.Errorf("zkdlock: owner %q is not a hex string", req.Owner)
	}
	label := driver.KindLabel(req.Kind, req.Limit)
	keyPath := d.keyPath(req.Key)
	a := &attempt{d: d, req: req, keyPath: keyPath, label: label, createPath: nodePath(keyPath, req.Owner, label, req.Mode)}
	g, err := a.run(ctx)
	if err != nil {
		if !a.clean {
			a.cleanup(ctx)
		}
		return nil, err
	}
	return g, nil
}

// step is what an attempt does next. run executes one step at a time; each
// step's function does that step's requests and sets the next step (or
// returns the grant, or the error that ends the attempt).
//
//	stepQueue  --created, queue known from the pre-listing--> stepPlace
//	stepQueue  --created, or the create unanswered----------> stepList
//	stepQueue  --no key node: made it-----------------------> stepQueue
//	stepQueue  --kind mismatch / TryLock would wait----------> error, no node made
//	stepList   --listed----------------------------------------> stepPlace
//	stepList   --our node is gone (its watch said so)--------> stepQueue
//	stepPlace  --granted--------------------------------------> grant
//	stepPlace  --must wait: plan chosen, watch in hand---------> stepWait
//	stepPlace  --a node adopted--------------------------------> stepList
//	stepPlace  --our node not in the listing-----------------> stepQueue
//	stepPlace  --kind mismatch / TryLock----------------------> error, node deleted
//	stepWait   --the event proves the grant-------------------> grant
//	stepWait   --any other event-------------------------------> stepList
//
// A transient failure keeps the step, or goes back to stepList, after a
// backoff (see retry); forget (our node is gone) always leads to
// stepQueue.
type step uint8

const (
	// stepQueue: we have no node (node is nodeNone). List the queue to
	// check the kind (and, for TryLock, that we would be granted at
	// once), then create our node. The listing is skipped when the
	// Client's last listing of the key showed it free or in use as this
	// kind: the create then comes first, and a mismatch is found by the
	// listing after it.
	stepQueue step = iota
	// stepList: we have, or may have, a node (node is nodeUnsure,
	// nodeAdopted or nodeKnown). List the queue, setting the watches the
	// next steps need in the same round trip.
	stepList
	// stepPlace: a.q is a listing made after our create was answered (or
	// the queue as the create left it, see preview). Apply the rule.
	stepPlace
	// stepWait: we wait behind others, watching as a.plan says.
	stepWait
)

// nodeState is what an attempt knows of its own node.
type nodeState uint8

const (
	// nodeNone: no node of ours exists, except one that a create still in
	// flight (counted in creates) may yet make: cleanup looks for it.
	nodeNone nodeState = iota
	// nodeUnsure: a create failed without an answer (or its reply was
	// lost): it may have made a node, which only a listing can find, by
	// the owner in its name.
	nodeUnsure
	// nodeAdopted: me is our node, found in a listing; the session that
	// owns it and its creation zxid are not known yet (watchOwn learns
	// them, and whether the node belongs to the current session).
	nodeAdopted
	// nodeKnown: me is our node, owned by session sid, created at zxid
	// czxid (the fencing token).
	nodeKnown
)

// attempt is one Acquire call.
type attempt struct {
	d       *zkDriver
	req     *driver.AcquireRequest
	keyPath string
	label   string // the kind's label (driver.KindLabel)
	// createPath is the path of this attempt's node as created, before
	// the server appends the sequence number: "<keyPath>/<tag>-<owner>-".
	createPath string
	// createReq, markReq and createOps are the create's multi (see
	// create), made with the attempt's first create and never written
	// after: a create given up on may still be in go-zookeeper's hands
	// when the next one is sent.
	createReq zk.CreateRequest
	markReq   zk.SetDataRequest
	createOps [2]any
	// delayReq, indexReq and delayOps: the create's multi with the
	// lock-delay's mark and its index entry (see lockdelay.go and
	// delayindex.go), used until the mark exists.
	delayReq zk.CreateRequest
	indexReq zk.CreateRequest
	delayOps [4]any
	marked   bool // our mark exists: a create made it, or said it exists
	// indexMissing: the last create failed for want of the index node.
	indexMissing bool
	// reclaim: our node was made anew beside a mark made before it,
	// which a Client may have taken for an orphan's (see reclaimMark).
	reclaim bool

	step step

	// creates counts Create requests that may still act on the server,
	// including those run gave up waiting for.
	creates sync.WaitGroup
	// created counts the creates sent. With one, answered, the attempt
	// knows its only possible node.
	created int
	// clean is set when no node of this attempt is left and no create can
	// still make one: cleanup has nothing to do.
	clean bool

	node nodeState
	me   lockNode // nodeAdopted, nodeKnown
	// path is me's path as the create's reply gave it, "" when me was
	// found in a listing (see mePath).
	path  string
	sid   int64 // nodeKnown
	czxid int64 // nodeKnown
	// own, when not nil, fires when me is deleted or the session ends: an
	// exists watch on me, or (ownChild) a child watch on the key node,
	// which fires on any change of the queue too. Invariant: own is only
	// set while node is nodeKnown.
	own      <-chan zk.Event
	ownChild bool
	// last: the grant's listing showed no node behind ours, so its
	// release may be a plain delete (see take).
	last bool
	// alone: a lock whose grant's listing showed our node and nothing
	// else, lock-delay marks included: its release may delete the key
	// node too (see take).
	alone bool

	// pre is the pre-listing of stepQueue, kept until the create answers.
	pre *preview
	// q and listSent are the listing stepPlace applies the rule to, and
	// when it was sent (a moment after which the session was alive); es
	// is entries(q), for the planner.
	q        []lockNode
	es       []planner.Entry
	listSent time.Time
	// qBuf and esBuf hold q and es when they come from a listing of the
	// attempt's own of a free key (see listAndWatch).
	qBuf  [1]lockNode
	esBuf [1]planner.Entry
	// marks are q's listing's lock-delay marks; delayAhead is set when
	// one of them may delay our grant (see lockdelay.go and handOff);
	// seen is when each orphan we sit out was first seen to end.
	marks      []mark
	delayAhead bool
	seen       map[string]time.Time
	// plan is what stepWait waits for.
	plan plan
	// ahead and held: a semaphore waiter's entries ahead of it, and its
	// watches on the first limit of them (planner.WaitAny: see waitAny).
	ahead []lockNode
	held  map[string]holderWatch
	// probe: a later waiter saw an entry ahead go, and watches every
	// entry of ahead from then on, or lists (see watching, listInstead).
	probe bool
	// syncFirst is set after a request failed on a broken connection, or
	// a watch said our node went: the next listing is preceded by a sync,
	// so that it reflects whatever happened on the server.
	syncFirst bool

	fails     int       // consecutive transient failures
	failSince time.Time // when the first of them happened
}

// run executes the attempt's steps until it is granted or fails (see
// step). In outline, for a lock (the other kinds differ in the rule and in
// what a waiter watches: rule.go):
//
//  1. List the queue: a node of another kind ends the attempt with
//     driver.KindMismatch, and TryLock ends with ErrLocked if it would
//     wait, before anything is created. (Skipped when the Client's last
//     listing of the key showed it free or in use as this kind: see
//     queue.)
//  2. Create our node (ephemeral, sequential, named after the owner and
//     the mode) in a multi with a setData on the key node: both take the
//     transaction's zxid, so the key node's new Stat gives our node's
//     creation zxid, the fencing token, and its child version says
//     whether anybody else joined or left since the listing of 1; if
//     nobody did, that listing and our node are the queue, and no second
//     listing is needed. If the key node does not exist, create it first.
//  3. Otherwise list again, setting in the same round trip an exists
//     watch on our node (a child watch with the listing when the last
//     attempt of this Client on this key found it free).
//  4. Our node is granted by the rule: the key is ours.
//  5. Otherwise TryLock deletes its node and gives up (so it never barges
//     past a waiter); Lock watches the node just before ours (only that
//     one: a release wakes one waiter, not the herd) and waits.
//  6. When that node was a holder that released (its data was written:
//     only a release does that, see grant.Release), or it is deleted and
//     it was first in our listing, our node is first now (sequence numbers
//     only grow, and our own watch has not fired): the key is ours without
//     another request. Any other event (a waiter ahead of us left) goes
//     back to 3.
//
// A lost create reply or a session expiry is recovered by listing: the
// listing finds the node by its owner, or finds none and queues again.
func (a *attempt) run(ctx context.Context) (*grant, error) {
	for {
		var (
			g   *grant
			err error
		)
		switch a.step {
		case stepQueue:
			err = a.queue(ctx)
		case stepList:
			err = a.list(ctx)
		case stepPlace:
			g, err = a.place(ctx)
		case stepWait:
			g, err = a.wait(ctx)
		}
		if err != nil || g != nil {
			return g, err
		}
	}
}

// place applies the rule to the listing a.q (stepPlace).
func (a *attempt) place(ctx context.Context) (*grant, error) {
	q := a.q
	mine, err := a.findMine(ctx, q)
	if err != nil {
		return nil, err
	}
	if mine < 0 {
		// Our node is gone (its session expired, or an operator
		// deleted it), or a create whose reply was lost made none:
		// queue again, at the end.
		a.forget()
		return nil, nil
	}
	a.d.setHint(a.keyPath, q, len(q) == 1)
	a.delayAhead = a.marks != nil && markAhead(a.marks, q, mine, a.req.Owner)
	p := a.decide(a.es, mine)
	if p.Verdict == planner.Mismatch {
		return nil, a.leave(ctx, driver.KindMismatch(q[p.Target].label, a.req.Kind, a.req.Limit))
	}
	if a.node == nodeAdopted {
		// A node adopted after a lost create reply: its Stat says
		// whose it is.
		a.step = stepList // list again: the node may have moved up meanwhile
		if err := a.watchOwn(ctx); err != nil {
			return nil, a.retry(ctx, "watch "+a.me.name, err)
		}
		return nil, nil
	}
	if a.reclaim {
		if err := a.reclaimMark(ctx); err != nil {
			a.step = stepList
			return nil, a.retry(ctx, "reclaim "+a.markPath(), err)
		}
		a.reclaim = false
	}
	if a.d.conn.SessionID() != a.sid {
		// Our node belongs to a session that has ended (a stale server
		// still lists it): watchOwn removes it, and we queue again.
		a.step = stepList
		if err := a.watchOwn(ctx); err != nil {
			return nil, a.retry(ctx, "watch "+a.me.name, err)
		}
		return nil, nil
	}
	a.fails = 0
	if p.Verdict == planner.Granted {
		return a.take(ctx, q, mine)
	}
	if !a.req.Wait {
		// Not granted at once: leave, without having made anybody wait.
		return nil, a.leave(ctx, a.locked(q, mine))
	}
	// A whole listing gives WaitFor or WaitAny (never NeedMore).
	a.plan = plan{Plan: p, target: q[p.Target]}
	if a.ownChild {
		// A child watch fires on every join: not for a waiter. It fires
		// once more and is gone.
		a.own, a.ownChild = nil, false
	}
	if p.Verdict == planner.WaitAny || p.Notice {
		// A semaphore's waiter, one of the first limit (WaitAny) or a
		// later one (WaitFor the entry limit places ahead, Notice): it
		// waits for the entries ahead to go (see waitAny), starting from
		// this listing, and keeps the watches it has on those still in it.
		a.plan.Verdict = planner.WaitAny
		a.ahead = append(a.ahead[:0], q[:mine]...)
		a.probe = false
		for name := range a.held {
			if !slices.ContainsFunc(a.ahead, func(n lockNode) bool { return n.name == name }) {
				delete(a.held, name) // gone: its watch fired or will
			}
		}
	}
	a.step = stepWait
	return nil, nil
}

// take makes the grant of our node, granted by the rule in the listing q
// (stepPlace). A semaphore's entry writes nothing once granted (planner's
// Notify is ignored, as on etcd): its later waiters count departures
// instead of waiting for a grant notice (see waitAny).
//
// A lock granted with no node behind ours in the listing releases with a
// plain delete (see grant.remove): a node that joins later is created
// after the state the listing showed, in which ours headed the queue and
// nothing could join ahead of it, so the listing of that node, made after
// its create, shows ours at its head, and the deletion of the head of its
// listing grants it without another request as the release's data change
// would. A semaphore's permit always releases with a plain delete (see
// plainRelease).
//
// A lock granted alone in the listing (no other node, no lock-delay mark)
// also deletes the key node with its own, in the release's transaction (see
// grant.remove), unless the key is in use again after such a delete (see
// keyHint.keep).
func (a *attempt) take(ctx context.Context, q []lockNode, mine int) (*grant, error) {
	a.last = a.req.Kind == driver.KindLock && mine == len(q)-1
	a.alone = a.last && len(q) == 1 && len(a.marks) == 0 && a.req.LockDelay == 0
	if a.own == nil {
		// Our node's watch, for the lease: the node exists (watchOwn
		// says when not) and stays granted until it goes.
		a.step = stepList
		if err := a.watchOwn(ctx); err != nil {
			return nil, a.retry(ctx, "watch "+a.me.name, err)
		}
		if a.node != nodeKnown {
			return nil, nil
		}
	}
	if os := orphans(a.marks, q, a.req.Owner); os != nil && grantedBehind(os, q, a.req.Limit) <= mine {
		// A lock-delay in force: an entry ahead ended without a
		// release (see lockdelay.go).
		return nil, a.sitOut(ctx, os)
	}
	a.step = stepList
	g, err := a.grant(ctx, a.listSent)
	if err != nil {
		return nil, a.retry(ctx, "read "+a.me.name, err)
	}
	return g, nil
}

// plainRelease reports whether the grant releases with a plain delete
// instead of the release transaction (see grant.remove): a lock granted
// with no node behind its own (see take), and every semaphore permit. A
// permit's waiters take its deletion for its departure and no data change
// for a grant, so the transaction's setData would tell them nothing more;
// it would only make a waiter that watched the permit at version 0 read it
// again, on the hand-off path (see waitAny).
func (a *attempt) plainRelease() bool {
	return a.last || a.req.Kind == driver.KindSemaphore
}

// dropKey reports whether the grant's release deletes the key node with its
// own (see take).
func (a *attempt) dropKey() bool {
	return a.alone && !a.d.hint(a.keyPath).keep
}

// leave deletes our node and returns err, the reason the attempt ends
// (TryLock that would wait, or a kind mismatch). cleanup tries again if
// the delete fails.
func (a *attempt) leave(ctx context.Context, err error) error {
	if a.deleteNode(ctx, a.me.name) == nil && a.dropMark(ctx) == nil {
		a.forget()
		a.clean = a.created == 1 // else an earlier create may yet land
	}
	return err
}

// locked is the error of a TryLock whose entry, at index mine of q (or at
// len(q), the tail, when it has none yet), is not granted.
func (a *attempt) locked(q []lockNode, mine int) error {
	if waiting := mine - grantedPrefix(q[:mine], a.req.Limit); waiting > 0 {
		return fmt.Errorf("%w: %d waiting", driver.ErrLocked, waiting)
	}
	return driver.ErrLocked
}

// forget drops what the attempt knew of its node: run queues again.
func (a *attempt) forget() {
	a.node, a.own, a.ownChild, a.sid, a.czxid, a.path = nodeNone, nil, false, 0, 0, ""
	a.ahead, a.held, a.last, a.alone, a.probe = a.ahead[:0], nil, false, false, false
	a.step = stepQueue
}

// mePath returns the path of our node: the create's reply's string when
// there is one, which spares building it again.
func (a *attempt) mePath() string {
	if a.path != "" {
		return a.path
	}
	return a.keyPath + "/" + a.me.name
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

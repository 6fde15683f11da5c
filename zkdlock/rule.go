package zkdlock

import (
	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// The grant rule (driver.Admits) on one listing of a key's queue: the
// key's lock nodes sorted by sequence, each carrying its mode (and the
// kind's label) in its name, so that every client evaluates the rule, and
// checks the kind, from one getChildren.
//
// Granted entries form a prefix of the queue. Admits(limit, m, s, x) can
// only turn false as s or x grow, and the entries ahead of q[j] are a
// subset of those ahead of q[i] for j < i; so if q[i] is granted, no
// Exclusive entry is ahead of it, q[j] is Shared (an Exclusive q[j] would
// be ahead of q[i]) or q[j] is q[0], and fewer Shared entries are ahead of
// q[j] than of q[i]: q[j] is granted too. And entries only ever leave the
// queue ahead of a node (a new node's sequence number is higher than every
// existing one's, and the key node cannot be reaped while a node is in
// it), so a node once granted stays granted until it goes. Hence grants
// follow queue order, which is creation order, which is the order of the
// nodes' creation zxids, the fencing tokens: see grant.Token.

// aheadOf counts the Shared and Exclusive entries ahead of index i of q.
func aheadOf(q []lockNode, i int) (shared, exclusive int) {
	for _, n := range q[:i] {
		if n.mode == driver.Shared {
			shared++
		} else {
			exclusive++
		}
	}
	return shared, exclusive
}

// admittedAt reports whether an entry of mode m at index i of q (i may be
// len(q): the tail, where a new entry would go) is granted, for a key of
// limit limit.
func admittedAt(q []lockNode, i, limit int, m driver.Mode) bool {
	s, x := aheadOf(q, i)
	return driver.Admits(limit, m, s, x)
}

// grantedPrefix returns how many entries at the head of q are granted (a
// prefix: see above).
func grantedPrefix(q []lockNode, limit int) int {
	s, x := 0, 0
	for i, n := range q {
		if !driver.Admits(limit, n.mode, s, x) {
			return i
		}
		if n.mode == driver.Shared {
			s++
		} else {
			x++
		}
	}
	return len(q)
}

// mismatchAhead returns the label of the first entry ahead of index i of q
// whose kind is not label.
//
// Every entry checks the entries ahead of it, never those behind: an entry
// that finds one of another kind ahead deletes its node and fails with
// driver.KindMismatch, before any grant. So an entry is never granted
// while one of another kind is ahead of it: its listing after its create
// saw every entry ahead of it that still existed, and none can join ahead
// later. When two clients of different kinds queue on a free key at once,
// the later one fails (and, rarely, an entry of the first kind that came
// after both and saw the later one still there: the key was in use as two
// kinds, and that one is told so).
func mismatchAhead(q []lockNode, i int, label string) (string, bool) {
	for _, n := range q[:i] {
		if n.label != label {
			return n.label, true
		}
	}
	return "", false
}

// watchKind is what a waiting entry watches.
type watchKind uint8

const (
	// watchNode: getData with a watch on plan.target, a node ahead.
	watchNode watchKind = iota
	// watchChildren: a child watch on the key node (the first waiter of
	// a semaphore, whose grant depends on how many go, not on which).
	watchChildren
)

// plan is how a waiting entry waits: what it watches, and which events of
// that watch prove, without another listing, that it is granted now.
type plan struct {
	kind   watchKind
	target lockNode // for watchNode
	// onRelease: a data change of target grants us. target is Exclusive
	// (or the head of the listing, in a key whose nodes are never written
	// before their release): only a releasing holder writes to such a
	// node (see grant.Release), so target was granted, and when it was,
	// nothing was ahead of it.
	onRelease bool
	// onDelete: target's deletion grants us: nothing that could block us
	// was ahead of it in the listing.
	onDelete bool
	// notices: target is a semaphore's waiter, which writes its node once
	// granted (see attempt.take): a data change, or a data version above
	// 0, says so, and we are then its first waiter at least.
	notices bool
	// childNext: after target's deletion the next listing should set the
	// child watch, as we are then the first waiter of a semaphore at
	// least.
	childNext bool
	// publishes: target is an election's candidate, whose holder writes
	// its node while it leads (Publish), so a data change is no release:
	// it proves that target holds, or held, the key. We then read target
	// again, with a new watch (see attempt.waitFor): gone means it
	// released (or lost its session) after it was granted, and nothing can
	// be ahead of us any more; there means it leads, and from then on
	// (proven) its deletion grants us. One request more per hand-off than
	// a lock's, and one per Publish, for the first candidate only.
	publishes bool
	// proven: target is known to have been granted (see publishes).
	proven bool
}

// electionLabel is the label of an election's nodes.
var electionLabel = driver.KindLabel(driver.KindElection, 1)

// publishes reports whether the holders of a key of label label write
// their nodes while they hold it (driver.Publisher): an election's
// leader. Nobody else may: the waiter behind a lock's or a writer's node
// takes a data change for a release (see grant.Release), and a
// semaphore's waiter for a grant notice (see attempt.take).
func publishes(label string) bool { return label == electionLabel }

// noticesIn reports whether the granted Shared entries of a key of limit
// limit write their nodes (a semaphore's: see attempt.take).
func noticesIn(limit int) bool { return limit > 0 }

// planWait chooses the watch of the waiting entry at index mine of q, of
// mode m, in a key of limit limit, so that a release wakes only the
// entries it makes grantable (plus, for a semaphore, the one entry that
// becomes its first waiter):
//
//   - Exclusive (a lock, a writer): the node just before it, as in
//     Curator's lock recipe. A release of a Shared node ahead (a reader)
//     may leave other readers holding: that wakes it once more per
//     release, never a herd.
//   - Shared, with no limit (a reader): the nearest Exclusive node ahead,
//     as in ZooKeeper's shared-lock recipe. When that writer releases,
//     every reader between it and the next writer is woken, and granted
//     together; readers behind the next writer are not woken.
//   - Shared, with a limit (a permit): the first waiter, behind exactly
//     limit holders, watches the children of the key node, since any
//     holder's departure grants it (a child watch also fires when an entry
//     joins behind it: one more listing per join). Every later waiter
//     watches the node just before it, for its deletion and for the
//     notice the node writes when it is granted: then the watcher is the
//     first waiter. So one departure wakes the first waiter, which is
//     granted, and through its notice the next one, which becomes first.
func planWait(q []lockNode, mine, limit int, m driver.Mode) plan {
	pred := q[mine-1]
	if m == driver.Exclusive && publishes(pred.label) {
		// A candidate: the node just before it, as a lock's waiter, but
		// a data change of that node is its leader's Publish or release,
		// which only a read tells apart.
		return plan{kind: watchNode, target: pred, onDelete: mine == 1, publishes: true}
	}
	if m == driver.Exclusive {
		return plan{
			kind:      watchNode,
			target:    pred,
			onRelease: pred.mode == driver.Exclusive || (mine == 1 && !(noticesIn(limit) && pred.mode == driver.Shared)),
			onDelete:  mine == 1,
		}
	}
	e := -1 // the nearest Exclusive entry ahead
	for i := mine - 1; i >= 0; i-- {
		if q[i].mode == driver.Exclusive {
			e = i
			break
		}
	}
	if e >= 0 {
		_, x := aheadOf(q, e)
		return plan{
			kind:      watchNode,
			target:    q[e],
			onRelease: limit == 0,
			onDelete:  limit == 0 && x == 0,
		}
	}
	// Only Shared entries ahead, at least limit of them.
	if admittedAt(q, mine-1, limit, pred.mode) {
		return plan{kind: watchChildren}
	}
	return plan{kind: watchNode, target: pred, notices: true, childNext: mine-1 <= limit}
}

// grants reports whether ev, an event of the watch on p.target, proves
// that our node is granted now (see planWait and attempt.waitFor).
func (p plan) grants(ev zk.Event) bool {
	switch ev.Type {
	case zk.EventNodeDataChanged:
		return p.onRelease
	case zk.EventNodeDeleted:
		return p.onDelete || p.proven
	}
	return false
}

// shortcut reports whether some event of the plan's watch grants without
// a listing: the attempt then needs a watch on its own node while it
// waits (see attempt.waitFor).
func (p plan) shortcut() bool { return p.onRelease || p.onDelete || p.publishes }

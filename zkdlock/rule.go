package zkdlock

import (
	"github.com/dlockdev/dlock/driver"
	planner "github.com/dlockdev/dlock/driver/queue"
	"github.com/go-zookeeper/zk"
)

// The grant rule (driver.Admits) on one listing of a key's queue: the
// key's lock nodes sorted by sequence, each carrying its mode (and the
// kind's label) in its name, so that every client evaluates the rule, and
// checks the kind, from one getChildren. The planner (driver/queue)
// decides on that listing whether an entry is granted, whom it watches
// and which events prove its grant; this file translates the listing into
// the planner's terms and its plan into watches.
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
//
// Kinds: every entry checks the entries ahead of it, never those behind:
// an entry that finds one of another kind ahead (planner.Mismatch) deletes
// its node and fails with driver.KindMismatch, before any grant. So an
// entry is never granted while one of another kind is ahead of it: its
// listing after its create saw every entry ahead of it that still existed,
// and none can join ahead later. When two clients of different kinds queue
// on a free key at once, the later one fails (and, rarely, an entry of the
// first kind that came after both and saw the later one still there: the
// key was in use as two kinds, and that one is told so).

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

// entries translates q for the planner: each node's mode and label, read
// from its name. A listing's are made once and shared, as the listing is,
// by the attempts that read it, since each plans on every entry ahead of
// it.
func entries(q []lockNode) []planner.Entry {
	return entriesInto(make([]planner.Entry, 0, len(q)), q)
}

// entriesInto is entries appending to es.
func entriesInto(es []planner.Entry, q []lockNode) []planner.Entry {
	for _, n := range q {
		es = append(es, planner.Entry{Mode: n.mode, Label: n.label})
	}
	return es
}

// decide plans the wait of our entry at index i of a listing whose entries
// are es (i = len(es): a new entry at the tail). The listing is whole, and
// an entry of another kind ahead is refused (see above).
func (a *attempt) decide(es []planner.Entry, i int) planner.Plan {
	return planner.Decide(planner.Listing{
		Ahead:     es[:i],
		Complete:  true,
		Mode:      a.req.Mode,
		Label:     a.label,
		Limit:     a.req.Limit,
		OtherKind: planner.Refuse,
		// Each of a semaphore's first limit waiters watches the
		// holders: see waitAny.
		Parallel: true,
	})
}

// plan is how a waiting entry waits, as the planner decided, so that a
// release wakes only the entries it may make grantable (plus, for a
// semaphore, the one entry that becomes one of its first limit waiters):
//
//   - planner.WaitAny (one of a semaphore's first limit waiters): getData
//     with a watch on each holder, the first limit entries ahead, and the
//     entries ahead counted down as they go, with no listing (see
//     waitAny): a release wakes the waiters it may grant, not those that
//     join behind.
//   - planner.WaitFor: getData with a watch on target, Ahead[Target]: for a
//     lock or a writer the node just before it, as in Curator's lock
//     recipe; for a reader the nearest Exclusive node ahead, as in
//     ZooKeeper's shared-lock recipe (its release grants every reader up
//     to the next writer together). (A later semaphore waiter's WaitFor,
//     the node limit places ahead with Notice, is waited as a WaitAny: see
//     attempt.place and waitAny.)
//
// The events of the watch on target that prove our grant without another
// listing (see grants and attempt.waitFor):
//
//   - Release: a data change of target. Only a releasing holder writes to
//     such a node (see grant.Release), so target was granted, and when it
//     was, nothing was ahead of it that could block us. Not so when
//     Publishes: target is an election's candidate, whose holder writes
//     its node while it leads (Publish), so a data change proves only
//     that target holds, or held, the key. We then read target again,
//     with a new watch (proven, see attempt.waitFor): gone means it
//     released (or lost its session) after it was granted, and nothing
//     can be ahead of us any more; there means it leads, and from then on
//     its deletion grants us. One request more per hand-off than a lock's,
//     and one per Publish, for the first candidate only.
//   - Delete: target's deletion: nothing that could block us was ahead of
//     it in the listing.
type plan struct {
	planner.Plan
	target lockNode // Ahead[Target], for planner.WaitFor
	// proven: target is known to have been granted (see Publishes).
	proven bool
}

// electionLabel is the label of an election's nodes.
var electionLabel = driver.KindLabel(driver.KindElection, 1)

// publishes reports whether the holders of a key of label label write
// their nodes while they hold it (driver.Publisher): an election's
// leader. Nobody else may: the waiter behind a lock's or a writer's node
// takes a data change for a release (see grant.Release), and a
// semaphore's waiter for a release or an older dlock's grant notice (see
// waitAny).
func publishes(label string) bool { return label == electionLabel }

// grants reports whether ev, an event of the watch on p.target, proves
// that our node is granted now (see plan and attempt.waitFor).
func (p plan) grants(ev zk.Event) bool {
	switch ev.Type {
	case zk.EventNodeDataChanged:
		return p.Release && !p.Publishes
	case zk.EventNodeDeleted:
		return p.Delete || p.proven
	}
	return false
}

// shortcut reports whether some event of the plan's watch grants without
// a listing: the attempt then needs a watch on its own node while it
// waits (see attempt.waitFor).
func (p plan) shortcut() bool { return p.Release || p.Delete || p.Publishes }

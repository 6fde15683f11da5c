// Package queue is the wait planner of dlock's queues: given what a waiting
// entry knows of the entries ahead of it, it decides whether the entry is
// granted and, if not, what it waits for and which events of that wait prove
// the grant without another read. It does no I/O: a backend lists and
// watches, and translates its listings into a [Listing] and the [Plan] into
// watches. Application code should use package dlock.
//
// # The rule
//
// The grant rule is driver.Admits: an entry is granted when every entry
// ahead of it is compatible with it and fewer than limit entries are ahead
// (0: no limit). Entries only leave the queue ahead of a waiter (new ones
// join behind), so an entry once granted stays granted until it goes, and a
// waiter need only wait for the departure, or the grant, of one chosen entry:
//
//   - Exclusive (a lock, a writer, a candidate): the entry just ahead.
//   - Shared with no limit (a reader): the nearest Exclusive entry ahead.
//   - Shared with a limit (a permit): the first waiter, behind exactly limit
//     holders, waits for any of them to go ([WaitAny]); a later waiter waits
//     for the entry just ahead, a waiter too, to go or to write the notice
//     it writes once granted (see [Plan.Notify]): it is then the first
//     waiter. With [Listing.Parallel], each of the first limit waiters waits
//     for the holders to go, and a later waiter for the entry limit places
//     ahead, whose grant notice makes it one of the first limit waiters.
//
// This is Curator's getsTheLock (the entry limit places ahead, or none) and
// its read-write lock's reader predicate (the first writer ahead), with the
// semaphore's first waiter watching every holder instead of one.
//
// # The backends
//
// ZooKeeper (zkdlock) lists the key's children whole: its Listing is
// Complete with every entry ahead, labelled from the node names, OtherKind
// Refuse, and Parallel. WaitFor is a getData with a watch on
// Ahead[Target]; WaitAny a getData with a watch on each of the first Any
// entries ahead, which it crosses out as they go (and watches the next),
// granted when fewer than Limit are left, Need departures after the
// listing. A data change of the target grants when Release && !Publishes
// (with Publishes it is told apart from a release by a read), its deletion
// when Delete. ZooKeeper writes no grant notice (Notify is ignored): a
// WaitFor with Notice is waited as a WaitAny that watches the limit+1
// entries nearest ahead, limit of which stand while the caller cannot be
// granted, and at the first departure reads (with a watch) every other
// entry of its listing, or lists when it keeps more than 2*limit+1, then
// counts.
//
// etcd (etcddlock) reads the queue in pages by create revision, at its
// attempt's stepEvaluate. An Exclusive entry reads keys only, newest first: its
// Listing is the entries read ahead of it, with empty Labels (modes
// unknown), Complete when the read reached the head; the release marker in
// the revision of the delete of the entry just ahead is the
// ExclusiveRelease proof. A reader reads values newest first: a Listing of
// the entries read so far, Complete when the read reached the head,
// OtherKind AsExclusive (an entry of another kind counts as a writer);
// NeedMore is its next page. A permit reads keys only, newest first, in
// pages of 2*limit+8 keys and up, its entries all Shared of its label (the
// kind check), Parallel: Complete when the read reached the head, which
// gives Granted, or WaitAny, which it waits for by counting the deletes of
// every entry read ahead until Need went; else limit entries or more read
// ahead give WaitFor with Notice, and fewer NeedMore. etcd writes no grant
// notice (Notify is ignored): a WaitFor with Notice waits for a delete of
// one of the limit+1 entries nearest ahead (from Ahead[Target-1]), limit of
// which stand while the caller cannot be granted, and keeps those watches
// for the count of a WaitAny that the read after it plans. At a join, the tail
// names the entry just ahead with its mode: a WaitFor there needs no read.
// etcd takes no Delete or Release proof from a plain delete: it reads
// again, which is always allowed.
package queue

import "github.com/dlockdev/dlock/driver"

// Entry is one entry of a listing.
type Entry struct {
	// Mode is what the entry holds or waits for; ignored when Label is "".
	Mode driver.Mode
	// Label is the entry's kind and limit (driver.KindLabel), or "" when
	// the listing did not read it (keys only): mode and kind are unknown.
	Label string
}

// OtherKind says what an entry of another kind than the caller's means.
type OtherKind uint8

const (
	// Refuse: an entry of another kind ahead fails the caller ([Mismatch]).
	Refuse OtherKind = iota
	// AsExclusive: an entry of another kind counts as Exclusive, so the
	// caller waits behind it.
	AsExclusive
)

// Listing is what a waiting entry knows of the entries ahead of it.
type Listing struct {
	// Ahead is the entries just ahead of the caller, oldest first: the
	// last one is the entry just ahead.
	Ahead []Entry
	// Before is how many entries are ahead of Ahead[0]: exact when
	// Complete, a lower bound otherwise. Their modes are not known.
	Before int
	// Complete says that Before is exact and Ahead holds every entry
	// after those Before, up to the caller.
	Complete bool
	// Mode, Label and Limit are the caller's: what it asks for, its
	// kind's label and the key's limit (0: none).
	Mode  driver.Mode
	Label string
	Limit int
	// OtherKind says what an entry of another label means.
	OtherKind OtherKind
	// Parallel, for a permit: on a Complete listing, each of the first
	// Limit waiters waits for the holders to go ([WaitAny] with Need),
	// so that permits freed together are taken together, each by its own
	// waiter, and none waits for another waiter's grant; a later waiter
	// (or, on a partial listing of Limit entries or more, any) waits for
	// the entry Limit places ahead ([WaitFor], Notice), and cannot be
	// granted while that entry and those behind it stand. The backend
	// must then watch up to Limit entries per waiter. Without it, only
	// the first waiter waits for any holder, and each later one for the
	// entry just ahead.
	Parallel bool
}

// Verdict is what the planner decided.
type Verdict uint8

const (
	// Granted: the caller holds the key.
	Granted Verdict = iota
	// WaitFor: the caller waits for the entry Ahead[Target].
	WaitFor
	// WaitAny: the caller is a semaphore's first waiter and waits for any
	// of the Any entries ahead of it (the holders) to go.
	WaitAny
	// NeedMore: the listing cannot decide; read the entries ahead of
	// Ahead[0], or their modes.
	NeedMore
	// Mismatch: Ahead[Target] is of another kind (OtherKind Refuse).
	Mismatch
)

// String names the verdict for tests and logs.
func (v Verdict) String() string {
	switch v {
	case Granted:
		return "granted"
	case WaitFor:
		return "wait-for"
	case WaitAny:
		return "wait-any"
	case NeedMore:
		return "need-more"
	case Mismatch:
		return "mismatch"
	}
	return "verdict(?)"
}

// Plan is the decision for one waiting entry. A backend may always read
// the queue again instead of trusting a proof: the proofs only save reads.
type Plan struct {
	Verdict Verdict
	// Target is the index in Listing.Ahead of the entry waited for
	// (WaitFor) or of another kind (Mismatch).
	Target int
	// Any is how many entries ahead the first waiter waits on (WaitAny):
	// the departure of any of them grants it. With Listing.Parallel, the
	// first Any entries ahead are the holders, and Need departures of
	// entries ahead (1 for the first waiter) grant the caller; a backend
	// that learns which entries went may count them, and must watch the
	// first Any entries left ahead, which are the holders then.
	Any int
	// Need is how many entries ahead must go before the caller is
	// granted (WaitAny).
	Need int
	// Release: a notice that Target was released by a holder grants the
	// caller (Target is Exclusive, or the head of a key whose holders
	// write only at their release).
	Release bool
	// ExclusiveRelease: a notice that Target was released by an Exclusive
	// holder grants the caller (such a holder had nothing ahead of it,
	// and only what the caller is compatible with is between them).
	ExclusiveRelease bool
	// Delete: Target's departure, however it went, grants the caller.
	Delete bool
	// Publishes: Target may write while it holds (an election's leader),
	// so a write of it is no release until a read tells them apart.
	Publishes bool
	// Notice: Target is a semaphore's waiter; its grant notice (see
	// Notify) means the caller may now be the first waiter: plan again.
	Notice bool
	// NoticeFirst: after Target's grant notice or departure the caller is
	// the first waiter at least, whose wait is WaitAny.
	NoticeFirst bool
	// Notify: when the caller is granted after it waited, it must write a
	// grant notice, which the waiter behind it may wait for (Notice).
	Notify bool
}

// Decide plans the wait of the entry that l describes.
func Decide(l Listing) Plan {
	notify := l.Mode == driver.Shared && l.Limit > 0
	// Another kind ahead: refused, or an Exclusive entry to wait behind.
	for i, e := range l.Ahead {
		if e.Label != "" && e.Label != l.Label && l.OtherKind == Refuse {
			return Plan{Verdict: Mismatch, Target: i, Notify: notify}
		}
	}
	var p Plan
	switch {
	case l.Mode == driver.Exclusive:
		p = decideExclusive(l)
	case l.Limit == 0:
		p = decideReader(l)
	default:
		p = decidePermit(l)
	}
	p.Notify = notify
	return p
}

// head reports whether Ahead[i] is known to be the head of the queue.
func (l Listing) head(i int) bool { return l.Complete && l.Before == 0 && i == 0 }

// exclusive reports whether e counts as Exclusive, and whether that is known.
func (l Listing) exclusive(e Entry) (x, known bool) {
	if e.Label == "" {
		return false, false
	}
	return e.Mode == driver.Exclusive || e.Label != l.Label, true
}

// decideExclusive: an Exclusive entry waits for the one just ahead.
func decideExclusive(l Listing) Plan {
	if len(l.Ahead) == 0 {
		if l.Complete && l.Before == 0 {
			// Nothing ahead: granted.
			return Plan{Verdict: Granted}
		}
		// Entries ahead, none listed: read the one just ahead.
		return Plan{Verdict: NeedMore}
	}
	t := len(l.Ahead) - 1
	pred := l.Ahead[t]
	x, known := l.exclusive(pred)
	if known && pred.Label == l.Label && publishes(pred.Label) {
		// A candidate: its leader's writes are Publish, told from a
		// release by a read, but its departure as the head grants us.
		return Plan{Verdict: WaitFor, Target: t, Delete: l.head(t), Publishes: true, ExclusiveRelease: true}
	}
	semShared := known && !x && l.Limit > 0
	return Plan{
		Verdict: WaitFor,
		Target:  t,
		// An Exclusive holder just ahead had nothing ahead of it.
		ExclusiveRelease: true,
		// Known Exclusive, or the head of a key whose holders write
		// only at release (a semaphore's Shared entries write notices).
		Release: (known && x) || (l.head(t) && !semShared),
		// The head's departure leaves nothing ahead.
		Delete: l.head(t),
	}
}

// decideReader: a reader waits for the nearest Exclusive entry ahead.
func decideReader(l Listing) Plan {
	for i := len(l.Ahead) - 1; i >= 0; i-- {
		x, known := l.exclusive(l.Ahead[i])
		if !known {
			// A mode not read: the reader needs values.
			return Plan{Verdict: NeedMore}
		}
		if !x {
			continue
		}
		// The writer's release as a holder leaves only readers between.
		p := Plan{Verdict: WaitFor, Target: i, Release: true, ExclusiveRelease: true}
		// Its departure grants us when nothing Exclusive is ahead of it.
		p.Delete = l.Complete && l.Before == 0 && !l.anyExclusive(i)
		return p
	}
	if l.Complete && l.Before == 0 {
		// Only readers ahead: granted.
		return Plan{Verdict: Granted}
	}
	// Only readers listed, more unread ahead of them.
	return Plan{Verdict: NeedMore}
}

// anyExclusive reports whether an entry ahead of Ahead[i] counts as
// Exclusive (entries with unknown modes do).
func (l Listing) anyExclusive(i int) bool {
	for _, e := range l.Ahead[:i] {
		if x, known := l.exclusive(e); x || !known {
			return true
		}
	}
	return false
}

// decidePermit: a permit counts the entries ahead (a semaphore's are all
// Shared; kinds are checked above).
func decidePermit(l Listing) Plan {
	n := l.Before + len(l.Ahead)
	if l.anyExclusive(len(l.Ahead)) && l.Complete {
		// An Exclusive entry in a semaphore (AsExclusive): wait for the
		// nearest one, and plan again when it goes.
		for i := len(l.Ahead) - 1; i >= 0; i-- {
			if x, known := l.exclusive(l.Ahead[i]); x || !known {
				return Plan{Verdict: WaitFor, Target: i}
			}
		}
	}
	switch {
	case l.Complete && n < l.Limit:
		// Fewer than limit ahead: granted.
		return Plan{Verdict: Granted}
	case l.Complete && n == l.Limit:
		// Exactly limit ahead, all holders: any departure grants us.
		return Plan{Verdict: WaitAny, Any: n, Need: 1}
	case l.Parallel && l.Complete && n < 2*l.Limit:
		// One of the first limit waiters: the holders are the first
		// limit entries, and n-limit+1 departures grant us.
		return Plan{Verdict: WaitAny, Any: l.Limit, Need: n - l.Limit + 1}
	case l.Parallel && len(l.Ahead) >= l.Limit:
		// A later waiter (or, on a partial listing, maybe one of the
		// first): when the entry limit places ahead is granted, fewer
		// than limit waiters are ahead of us; and we cannot be granted
		// while it and the entries behind it, limit in all, stand.
		return Plan{Verdict: WaitFor, Target: len(l.Ahead) - l.Limit, Notice: true}
	case n > l.Limit && len(l.Ahead) > 0 && !l.Parallel:
		// A later waiter: the entry just ahead waits too.
		return Plan{Verdict: WaitFor, Target: len(l.Ahead) - 1, Notice: true, NoticeFirst: l.Complete && n == l.Limit+1}
	}
	// Not enough listed to count past the limit.
	return Plan{Verdict: NeedMore}
}

// publishes reports whether the holders of a key of this label write while
// they hold it (an election's leader, driver.Publisher).
func publishes(label string) bool {
	return label == driver.KindLabel(driver.KindElection, 1)
}

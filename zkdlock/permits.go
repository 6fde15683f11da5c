package zkdlock

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"
)

// How a semaphore's waiter waits (planner.WaitAny with Listing.Parallel,
// and a later waiter's WaitFor with Notice, waited the same way): each
// waiter counts the departures of the entries ahead of it, and is granted
// by the count, with no listing and no request after the departure that
// completes it; permits freed together are taken together, each by its own
// waiter, and no grant waits for another waiter's grant.
//
// The waiter keeps ahead, the entries ahead of its node in its listing
// (made after its create), less those it has seen go. Why that grant is
// safe (never more than limit holders, in queue order): entries only ever
// leave the queue ahead of a node (new ones join behind, see rule.go), so
// the queue ahead is at all times a subset of ahead; when fewer than limit
// are left in ahead, fewer than limit are ahead of our node, and it is
// granted by the rule, as a listing would show (our node still exists: see
// grantHeld). It removes an entry only on proof that it went:
//
//   - its deletion (an event, or getData finding no node): a permit is
//     released with a plain delete (see attempt.plainRelease);
//   - a data change of a node that had been written before the watch was
//     set (data version 1 or more). This dlock never writes a semaphore's
//     node; an older one wrote it once, by its grant notice (a setData
//     expecting version 0), and at its release (a setData and the delete
//     in one transaction), so such a change is a release. A data change
//     of a node at version 0 may be an older dlock's notice: it is read
//     again (gone, or written: watched again).
//
// Which entries it watches (getData with a watch, each once for as long as
// it is kept, with an exists watch on its own node, in one round trip; see
// watching) decides only when it learns of a departure, never whether a
// grant is safe:
//
//   - fewer than 2·limit kept (one of the first limit waiters): the first
//     limit entries of ahead. An entry found gone when watched is removed,
//     and the next one watched: the first limit kept that are still there
//     are the queue's first limit entries, all granted, so one of them goes
//     before ours can be granted, and its watch wakes us.
//   - a later waiter: the limit+1 entries nearest ahead. Ours cannot be
//     granted while limit of them stand, so one of them goes first, and
//     the farthest goes first as a rule (it was granted first), while ours
//     still waits for another. At that first departure, if it keeps at
//     most 2·limit+1 entries, it probes those it does not watch (one
//     getData with a watch each, in one round trip): those gone are
//     crossed out, and it watches every entry left from then on. Its
//     promotion to the first limit waiters then needs no listing, and its
//     grant, as theirs, no request. Keeping more (it joined behind a long
//     queue), it lists the queue instead (see listInstead) and waits again
//     with the watches it has. Either way the promotion comes one
//     departure before the waiter can be granted, and no grant notice is
//     needed: no grant writes its node.
//
// Events that came together are all counted before any request. A waiter
// watches no entry more than 2·limit+1 places ahead of it (its nearest
// limit+1, the first limit while fewer than 2·limit are ahead, or all of
// at most 2·limit+1 after a departure): a release notifies a bounded
// number of waiters, whatever the queue's length, and the requests per
// grant do not grow with the queue.

// holderWatch is a semaphore waiter's watch on an entry ahead of it.
type holderWatch struct {
	ch <-chan zk.Event
	// noticed: the node had been written (an older dlock's grant notice)
	// before the watch was set, so its next data change is a release.
	noticed bool
}

// waitAny is stepWait for planner.WaitAny, and for a later waiter's
// planner.WaitFor with Notice: wait as above, until the entries left in
// a.ahead are fewer than the limit (granted), our node's watch fires, a
// watch says the session ended, or ctx ends. Anything but a grant or
// ctx's end lists again, and so does a later waiter that keeps too many
// entries to probe them (see listInstead).
func (a *attempt) waitAny(ctx context.Context) (*grant, error) {
	a.step = stepList
	limit := a.req.Limit
	for len(a.ahead) >= limit {
		if err := a.watchHolders(ctx, limit); err != nil {
			return nil, a.retry(ctx, "watch "+a.ahead[0].name, err)
		}
		if a.listInstead(limit) {
			return nil, nil // too many to probe: a listing is one request
		}
		if a.own == nil {
			return nil, nil // our node is gone: queue again
		}
		if len(a.ahead) < limit {
			break // some were gone already
		}
		// Wait for the first event of a watch on an entry ahead, our
		// node's, or ctx: at most 2·limit+3 channels.
		cases := make([]reflect.SelectCase, 0, len(a.held)+2)
		cases = append(cases,
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.own)})
		watched := make([]string, 0, len(a.held))
		for _, n := range a.ahead {
			if w, ok := a.held[n.name]; ok {
				watched = append(watched, n.name)
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.ch)})
			}
		}
		i, v, _ := reflect.Select(cases)
		switch i {
		case 0:
			return nil, ctx.Err()
		case 1:
			a.ownEvent(v.Interface().(zk.Event))
			return nil, nil
		}
		if !a.heldEvent(watched[i-2], v.Interface().(zk.Event)) {
			return nil, nil
		}
		// Departures that came together are counted together, before
		// any request: the one that frees our permit may be queued
		// behind one that does not.
		for _, name := range watched {
			select {
			case ev := <-a.held[name].ch: // nil, never ready, once seen
				if !a.heldEvent(name, ev) {
					return nil, nil
				}
			default:
			}
		}
	}
	return a.grantHeld(ctx)
}

// listInstead reports whether a later waiter that saw a departure keeps
// too many entries to probe them (see watching): more than 2·limit+1, so
// that a waiter watches no entry farther ahead than that, and a listing,
// one request, costs less than the reads.
func (a *attempt) listInstead(limit int) bool {
	return a.probe && len(a.ahead) > 2*limit+1
}

// watching returns the entries of a.ahead that must be watched now (see
// the waiting above): the first limit while fewer than 2·limit are kept;
// a later waiter's limit+1 nearest until it sees a departure, and every
// entry kept from then on.
func (a *attempt) watching(limit int) []lockNode {
	n := len(a.ahead)
	switch {
	case n < 2*limit:
		return a.ahead[:limit]
	case a.probe:
		return a.ahead
	}
	return a.ahead[n-limit-1:]
}

// heldEvent applies ev, an event of the watch on the entry named name
// (see waitAny); false means the session ended and the waiter lists again.
func (a *attempt) heldEvent(name string, ev zk.Event) bool {
	w := a.held[name]
	delete(a.held, name) // a watch fires once
	switch {
	case ev.Type == zk.EventNodeDeleted,
		ev.Type == zk.EventNodeDataChanged && w.noticed:
		// It went.
		a.ahead = slices.DeleteFunc(a.ahead, func(n lockNode) bool { return n.name == name })
		a.probe = true
	case ev.Type == zk.EventNodeDataChanged:
		// An older dlock's notice, or its release: the next
		// watchHolders reads it.
	default:
		// The session ended (EventNotWatching), and every watch with
		// it: the listing tells.
		a.syncFirst, a.held = true, nil
		return false
	}
	return true
}

// grantHeld makes the grant of our node, which fewer than limit entries
// are ahead of, if it still exists. ZooKeeper sends a session its
// notifications, and the replies to its requests, in order, and
// go-zookeeper hands a notification to its channels before it completes a
// later reply; so had our node been deleted before the event or the reply
// that showed the last departure needed, its watch would have fired.
func (a *attempt) grantHeld(ctx context.Context) (*grant, error) {
	if a.ownFired() {
		return nil, nil
	}
	return a.handOff(ctx)
}

// watchHolders sets a watch on each entry of a.watching that has none,
// and on our node if it has none, in one round trip. Entries found gone
// are removed from a.ahead, and the next ones watched.
func (a *attempt) watchHolders(ctx context.Context, limit int) error {
	d := a.d
	for len(a.ahead) >= limit && !a.listInstead(limit) {
		var todo []lockNode
		for _, n := range a.watching(limit) {
			if _, ok := a.held[n.name]; !ok {
				todo = append(todo, n)
			}
		}
		if len(todo) == 0 && a.own != nil {
			return nil
		}
		var watched chan error
		if a.own == nil {
			watched = make(chan error, 1)
			go func() { watched <- a.watchOwn(ctx) }()
		}
		type got struct {
			r   getW
			err error
		}
		sid := d.conn.SessionID()
		sent := time.Now()
		res := make([]chan got, len(todo))
		for i, n := range todo {
			res[i] = make(chan got, 1)
			path := a.keyPath + "/" + n.name
			go func() {
				// getData, not exists: exists on a node already gone
				// would leave a watch behind (see waitFor).
				r, err := call(ctx, nil, a.callTimeout(), func() (getW, error) {
					_, stat, ch, err := d.conn.GetW(path)
					return getW{stat: stat, ch: ch}, err
				})
				res[i] <- got{r, err}
			}()
		}
		gots := make([]got, len(todo))
		for i := range todo {
			gots[i] = <-res[i]
		}
		// watchOwn changes the attempt (forget): only after it is done.
		var firstErr error
		if watched != nil {
			firstErr = <-watched
		}
		if firstErr == nil && a.own == nil {
			return nil // our node is gone
		}
		gone := map[string]bool{}
		for i, n := range todo {
			g := gots[i]
			switch {
			case errors.Is(g.err, zk.ErrNoNode):
				gone[n.name] = true
			case g.err != nil:
				firstErr = cmpErr(firstErr, g.err)
			default:
				if a.held == nil {
					a.held = make(map[string]holderWatch, limit)
				}
				a.held[n.name] = holderWatch{ch: g.r.ch, noticed: g.r.stat.Version > 0}
			}
		}
		if firstErr != nil {
			return firstErr
		}
		d.noteAlive(sid, sent)
		if len(gone) == 0 {
			return nil
		}
		kept := a.ahead[:0]
		for _, n := range a.ahead {
			if !gone[n.name] {
				kept = append(kept, n)
			}
		}
		a.ahead, a.probe = kept, true
	}
	return nil
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

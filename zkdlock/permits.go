package zkdlock

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"
)

// How a semaphore's waiter waits (planner.WaitAny with Listing.Parallel):
// each of the first limit waiters waits on its own for the holders to go,
// so that permits freed together are taken together, each by its own
// waiter, and no grant waits for another waiter's grant or notice. A later
// waiter watches the entry limit places ahead (plan, Notice): once that
// one is granted, every waiter ahead of it is too, so fewer than limit
// waiters are left ahead of ours, and it lists and joins the first limit.
//
// The waiter keeps ahead, the entries ahead of its node in its listing
// (made after its create), less those it has seen go. Entries only ever
// leave the queue ahead of a node (see rule.go), so the queue ahead is at
// all times a subset of ahead: when fewer than limit are left in ahead,
// fewer than limit are ahead of our node, and it is granted by the rule
// without another listing (our node still exists: see grantHeld). It
// removes an entry only on proof that it went:
//
//   - its deletion (an event, or getData finding no node): a permit is
//     released with a plain delete (see attempt.plainRelease);
//   - a data change of a node that had been written before the watch was
//     set (data version 1 or more). A semaphore's node is written once by
//     its grant notice (a setData expecting version 0, see writeNotice),
//     and otherwise only by a release of an older dlock (a setData and the
//     delete in one transaction), so such a change is a release.
//     A data change of a node at version 0 may be its notice: it is read
//     again (gone, or written: watched again).
//
// It watches the first limit entries of ahead (getData with a watch),
// each once for as long as it stays there, and its own node (an exists
// watch), all in one round trip. An entry found gone when watched is
// removed, and the next one watched: the first limit entries of ahead that
// are still there are the first limit entries of the queue, all granted,
// so one of them goes before ours can be granted, and its watch wakes us.
// Events that came together are all counted before any request. A release
// thus notifies at most limit waiters (those watching it), the one it
// grants sends no request, and each other sends one getData for the new
// holder (and one more when it was watched before its notice): the
// requests per grant do not grow with the queue.

// holderWatch is a semaphore waiter's watch on an entry ahead of it.
type holderWatch struct {
	ch <-chan zk.Event
	// noticed: the node had been written (its grant notice) before the
	// watch was set, so its next data change is a release.
	noticed bool
}

// waitAny is stepWait for planner.WaitAny: wait as above, until the
// entries left in a.ahead are fewer than the limit (granted), our node's
// watch fires, a watch says the session ended, or ctx ends. Anything but
// a grant or ctx's end lists again.
func (a *attempt) waitAny(ctx context.Context) (*grant, error) {
	a.step = stepList
	limit := a.req.Limit
	for len(a.ahead) >= limit {
		if err := a.watchHolders(ctx, limit); err != nil {
			return nil, a.retry(ctx, "watch "+a.ahead[0].name, err)
		}
		if a.own == nil {
			return nil, nil // our node is gone: queue again
		}
		if len(a.ahead) < limit {
			break // some were gone already
		}
		// Wait for the first event of a holder's watch, our node's, or
		// ctx: at most limit+2 channels.
		cases := make([]reflect.SelectCase, 0, limit+2)
		cases = append(cases,
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.own)})
		watched := make([]string, 0, limit)
		for _, n := range a.ahead[:limit] {
			watched = append(watched, n.name)
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.held[n.name].ch)})
		}
		i, v, _ := reflect.Select(cases)
		switch i {
		case 0:
			return nil, ctx.Err()
		case 1:
			a.ownEvent(v.Interface().(zk.Event))
			return nil, nil
		}
		if !a.heldEvent(a.ahead[i-2].name, v.Interface().(zk.Event)) {
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
	case ev.Type == zk.EventNodeDataChanged:
		// Its notice, or its release: the next watchHolders reads it.
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
	// A permit granted without a listing does not know who queued behind
	// it since its own: it writes its notice, which a later waiter may
	// wait for (see take).
	a.notify = true
	return a.handOff(ctx)
}

// watchHolders sets a watch on each of the first limit entries of a.ahead
// that has none, and on our node if it has none, in one round trip.
// Entries found gone are removed from a.ahead, and the next ones watched.
func (a *attempt) watchHolders(ctx context.Context, limit int) error {
	d := a.d
	for len(a.ahead) >= limit {
		var todo []lockNode
		for _, n := range a.ahead[:limit] {
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
		a.ahead = kept
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

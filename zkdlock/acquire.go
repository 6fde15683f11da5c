package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
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
		a.cleanup(ctx)
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

	fails     int       // consecutive transient failures
	failSince time.Time // when the first of them happened
}

// run queues the attempt and waits for its turn:
//
//  1. List the key node's children, sorted by sequence.
//  2. No node of ours: create one (ephemeral, sequential, named after the
//     owner) and go to 1. TryLock first gives up if anybody is queued, so
//     that it never barges past a waiter.
//  3. Our node is first: the key is ours.
//  4. Otherwise TryLock gives up; Lock watches the node just before ours
//     (only that one: a release wakes one waiter, not the herd), and goes to
//     1 when it changes, or at once if it is already gone.
//
// Going back to the listing after every event makes each step safe to
// repeat: after a lost Create reply the listing finds the node by its owner;
// after a session expiry it finds none and queues again.
func (a *attempt) run(ctx context.Context) (*grant, error) {
	for {
		q, err := a.list(ctx)
		if errors.Is(err, zk.ErrNoNode) {
			// The key node does not exist (yet, or any more: the server
			// deletes empty containers).
			if err := a.ensureKeyNode(ctx); err != nil {
				if err := a.retry(ctx, "create "+a.keyPath, err); err != nil {
					return nil, err
				}
			}
			continue
		}
		if err != nil {
			if err := a.retry(ctx, "list "+a.keyPath, err); err != nil {
				return nil, err
			}
			continue
		}
		a.fails = 0

		mine := -1
		for i, n := range q {
			if n.owner != a.req.Owner {
				continue
			}
			if mine < 0 {
				mine = i
				continue
			}
			// A second node of ours can only come from a create that
			// was retried in a way ZooKeeper's ordering should prevent;
			// keep the earlier place and remove the other.
			if err := a.deleteNode(ctx, n.name); err != nil {
				if err := a.retry(ctx, "delete "+n.name, err); err != nil {
					return nil, err
				}
			}
		}

		switch {
		case mine < 0 && !a.req.Wait && len(q) > 0:
			return nil, a.locked(q)
		case mine < 0:
			// Queue: one ephemeral sequential node, created by this
			// session, carrying the metadata for inspectors.
			if err := a.create(ctx); err != nil {
				if errors.Is(err, zk.ErrNoNode) {
					continue // the key node went away; the listing recreates it
				}
				if err := a.retry(ctx, "create a node under "+a.keyPath, err); err != nil {
					return nil, err
				}
			}
		case mine == 0:
			g, err := a.grant(ctx, q[0])
			if err != nil {
				if err := a.retry(ctx, "read "+q[0].name, err); err != nil {
					return nil, err
				}
				continue
			}
			if g != nil {
				return g, nil
			}
		case !a.req.Wait:
			return nil, a.locked(q)
		default:
			if err := a.waitFor(ctx, q[mine-1]); err != nil {
				if err := a.retry(ctx, "watch "+q[mine-1].name, err); err != nil {
					return nil, err
				}
			}
		}
	}
}

func (a *attempt) locked(q []lockNode) error {
	return fmt.Errorf("%w: key %q: held by another owner, %d in the queue", driver.ErrLocked, a.req.Key, len(q))
}

// list returns the queue of the key.
func (a *attempt) list(ctx context.Context) ([]lockNode, error) {
	d := a.d
	if a.syncFirst {
		// Sync: bring the server we talk to up to date with the leader, so
		// that the listing sees a Create whose reply was lost. ZooKeeper
		// rejects, as "session moved", requests that a previous server
		// forwards after the session moved, so nothing older can land later.
		if err := call0(ctx, nil, d.timeout(), func() error {
			_, err := d.conn.Sync(a.keyPath)
			return err
		}); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		a.syncFirst = false
	}
	// getChildren: who holds and who waits.
	children, err := call(ctx, nil, d.timeout(), func() ([]string, error) {
		children, _, err := d.conn.Children(a.keyPath)
		return children, err
	})
	if err != nil {
		return nil, err
	}
	return queue(children), nil
}

// ensureKeyNode creates the key's node as a container, so that the server
// deletes it once its last child is gone, and the root if that is missing.
func (a *attempt) ensureKeyNode(ctx context.Context) error {
	d := a.d
	_, err := call(ctx, nil, d.timeout(), func() (string, error) {
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

// create adds this attempt's node to the queue. The request is counted in
// a.creates until it completes, even when ctx ends first.
func (a *attempt) create(ctx context.Context) error {
	d := a.d
	// create -e -s: ZooKeeper appends the sequence number to the name.
	_, err := call(ctx, &a.creates, d.timeout(), func() (string, error) {
		return d.conn.Create(a.keyPath+"/"+a.prefix, a.req.Metadata, zk.FlagEphemeralSequential, d.acl)
	})
	return err
}

// grant checks the node that heads the queue and is ours, and sets the
// watch that reports its loss. It returns nil, nil when the node turned out
// not to be valid (gone, or left by a session that has ended), so that run
// lists again.
func (a *attempt) grant(ctx context.Context, me lockNode) (*grant, error) {
	d := a.d
	path := a.keyPath + "/" + me.name
	sid := d.conn.SessionID()
	start := time.Now() // ValidFrom: the session was alive when the server answered
	// getData with a watch: the creation zxid is the fencing token, the
	// owner session proves the node is this session's, and the watch fires
	// when the node is deleted or the session expires.
	r, err := call(ctx, nil, d.timeout(), func() (getW, error) {
		_, stat, ch, err := d.conn.GetW(path)
		return getW{stat, ch}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if sid == 0 || r.stat.EphemeralOwner != sid || d.conn.SessionID() != sid {
		// Ours by name but not by session: a node of a session that has
		// expired, seen by a server that has not caught up. Remove it (it
		// is going anyway) and queue again.
		if err := a.deleteNode(ctx, me.name); err != nil && isCtxErr(err) {
			return nil, err
		}
		a.syncFirst = true
		return nil, nil
	}
	return newGrant(d, a.req.Key, path, sid, r.stat.Czxid, start, r.ch), nil
}

type getW struct {
	stat *zk.Stat
	ch   <-chan zk.Event
}

// waitFor blocks until pred, the node just before ours, changes or goes
// away, or ctx ends.
func (a *attempt) waitFor(ctx context.Context, pred lockNode) error {
	d := a.d
	path := a.keyPath + "/" + pred.name
	// getData with a watch, not exists: on a node that is already gone,
	// exists would leave a watch behind for a name nobody will create again
	// (Curator avoids it the same way).
	ch, err := call(ctx, nil, d.timeout(), func() (<-chan zk.Event, error) {
		_, _, ch, err := d.conn.GetW(path)
		return ch, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil // it went between the listing and the watch: look again
	}
	if err != nil {
		return err
	}
	select {
	case <-ch:
		// Deleted (our turn, perhaps), changed, or the session ended:
		// in every case the listing says what to do next.
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *attempt) deleteNode(ctx context.Context, name string) error {
	d := a.d
	err := call0(ctx, nil, d.timeout(), func() error { return d.conn.Delete(a.keyPath+"/"+name, -1) })
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// retry decides what to do after a failed request: give up with a wrapped
// error if it is permanent, if ctx has ended, or if requests have failed
// for a whole session timeout (by then the session is either back or
// expired, and the ensemble is unavailable to us); otherwise pause briefly
// and return nil so that run tries again.
func (a *attempt) retry(ctx context.Context, op string, err error) error {
	if !transient(err) {
		return a.d.wrapErr(op, err)
	}
	a.syncFirst = true
	now := time.Now()
	if a.fails == 0 {
		a.failSince = now
	}
	a.fails++
	if failing := now.Sub(a.failSince); failing >= a.d.timeout() {
		return a.d.wrapErr(fmt.Sprintf("%s (no success for %v)", op, failing.Round(time.Millisecond)), err)
	}
	if err := backoff(ctx, a.fails, a.d.timeout()/10); err != nil {
		return a.d.wrapErr(op, err)
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
			if err := a.deleteNode(ctx, n.name); err != nil {
				ok = false
			}
		}
	}
	return ok
}

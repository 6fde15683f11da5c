package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

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
	if (a.node == nodeKnown || a.node == nodeAdopted) && a.created == 1 {
		// The one create answered: the only node of ours is a.me.
		if err := a.deleteNodeWithin(ctx, a.me.name, a.d.timeout()); err == nil && a.dropMark(ctx) == nil {
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
	if ok && a.dropMark(ctx) != nil {
		ok = false
	}
	return ok
}

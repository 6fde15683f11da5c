package zkdlock_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// acquireFunc is one of the acquiring calls: Lock, Semaphore.Acquire,
// RWMutex.RLock, …
type acquireFunc func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error)

// ctxT shortens the signatures of acquireFunc literals.
type ctxT = context.Context

// pendingAcquire is an acquiring call running in the background.
type pendingAcquire struct {
	done chan struct{} // closed when the call has returned
	l    *dlock.Lease
	err  error
}

func startAcquire(ctx context.Context, f acquireFunc) *pendingAcquire {
	p := &pendingAcquire{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.l, p.err = f(ctx)
	}()
	return p
}

func (p *pendingAcquire) returned() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// lease waits for the call and returns its lease, failing the test if it
// failed or at the watchdog.
func (p *pendingAcquire) lease(t *testing.T, ctx context.Context, what string) *dlock.Lease {
	t.Helper()
	select {
	case <-p.done:
	case <-ctx.Done():
		t.Fatalf("%s: never granted (watchdog)", what)
	}
	if p.err != nil {
		t.Fatalf("%s: %v", what, p.err)
	}
	return p.l
}

// watcher is a Client on a session of its own that counts the watch
// notifications its session receives and the watches it set.
type watcher struct {
	name   string
	c      *dlock.Client
	conn   *zk.Conn
	hook   *watchCount
	events atomic.Int64
}

// watchCount counts, besides hookConn's counts, the watches set: child
// watches and data watches whose reply has come back.
type watchCount struct {
	*hookConn
	childWs atomic.Int64
}

func (w *watchCount) ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	c, s, ch, err := w.hookConn.ChildrenW(path)
	w.childWs.Add(1)
	return c, s, ch, err
}

// watches is how many watches on other nodes (or the key node's
// children) the client has set.
func (w *watcher) watches() int64 { return w.hook.getWs.Load() + w.hook.childWs.Load() }

func newWatcher(t *testing.T, ctx context.Context, addr, name string, opts zkdlock.Options) *watcher {
	t.Helper()
	w := &watcher{name: name}
	w.conn = dialZK(t, ctx, addr, connOpts{timeout: opts.SessionTimeout, onEvent: func(ev zk.Event) {
		switch ev.Type {
		case zk.EventNodeCreated, zk.EventNodeDeleted, zk.EventNodeDataChanged, zk.EventNodeChildrenChanged:
			w.events.Add(1)
		}
	}})
	w.hook = &watchCount{hookConn: &hookConn{Conn: w.conn}}
	w.c = newClient(t, ctx, w.hook, opts)
	return w
}

// counts is a snapshot of a watcher's counters.
type counts struct{ events, requests, lists int64 }

func (w *watcher) counts() counts {
	return counts{w.events.Load(), w.hook.requests.Load(), w.hook.lists.Load()}
}

// settle makes a round trip on the watcher's session: ZooKeeper sends a
// session its watch notifications before the replies to its later
// requests, so every notification caused by what happened before has been
// counted once settle returns.
func (w *watcher) settle(t *testing.T) {
	t.Helper()
	if _, err := w.conn.Sync("/"); err != nil {
		t.Fatal(err)
	}
}

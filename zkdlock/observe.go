package zkdlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// Watch implements driver.Observer with ZooKeeper watches only, never a
// poll: a child watch on the key's node, which fires when a holder or
// waiter comes or goes (a grant, a release, an expiry), and a data watch
// on the first node of the queue, which fires when its holder publishes
// (an election's leader, see grant.Publish). While the key has no node
// (nobody holds or waits, and the server reaped the empty container), an
// exists watch on it, which fires when it is created. Each watch is set
// again, after it fires, before the channel receives its value, so that a
// change after the caller's read always fires a watch set before it. The
// first value comes at once, when the watches are set. Waiters joining
// and leaving fire the child watch too (Client.Watch shows them; an
// election's observer reads the same leader).
//
// The channel is closed when ctx ends, when the Client is closed, and when
// the session ends (go-zookeeper ends every watch of an expired session:
// watches live in the session) or the watches cannot be set again within a
// session timeout. A connection lost and found again keeps the session and
// its watches: go-zookeeper sets them again, with the last zxid it saw, and
// the server fires those whose nodes changed meanwhile.
//
// go-zookeeper cannot remove a watch: those left armed when the channel
// closes stay registered, one to three per Watch call, until they fire or
// the session ends.
func (d *zkDriver) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	sid := d.conn.SessionID()
	if sid == 0 {
		return nil, d.wrapErr("watch "+key, zk.ErrNoServer)
	}
	o := &observer{d: d, key: key, keyPath: d.keyPath(key), sid: sid, out: make(chan struct{}, 1)}
	if err := o.armKey(ctx); err != nil {
		return nil, d.wrapErr("watch the queue of "+key, err)
	}
	o.notify()
	go o.run(ctx)
	return o.out, nil
}

// observer is one Watch.
type observer struct {
	d       *zkDriver
	key     string
	keyPath string
	sid     int64 // the session whose watches these are
	out     chan struct{}

	// key fires on a change of the key node's children (or its deletion),
	// or, when the node was missing, on its creation.
	keyW <-chan zk.Event
	// first is the name of the first node of the queue as last listed,
	// whose data firstW watches ("": none).
	first  string
	firstW <-chan zk.Event
}

// notify gives the caller a value, unless one is waiting already.
func (o *observer) notify() {
	select {
	case o.out <- struct{}{}:
	default:
	}
}

func (o *observer) run(ctx context.Context) {
	defer close(o.out)
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-o.d.ctx.Done():
			return
		case ev := <-o.keyW:
			o.keyW = nil
			if o.ended(ev) {
				return
			}
			err = o.rearm(ctx, o.armKey)
		case ev := <-o.firstW:
			o.firstW = nil
			if o.ended(ev) {
				return
			}
			if ev.Type == zk.EventNodeDeleted {
				// The child watch fires too; its listing finds the
				// new first node.
				o.first = ""
				break
			}
			err = o.rearm(ctx, o.armFirst)
		}
		if err != nil {
			return
		}
		o.notify()
	}
}

// ended reports whether ev ends the watch: the session expired or the
// connection was closed (go-zookeeper's EventNotWatching), or the Client
// is on a session other than the watches'.
func (o *observer) ended(ev zk.Event) bool {
	return ev.Type == zk.EventNotWatching || o.d.conn.SessionID() != o.sid
}

// rearm runs arm until it succeeds, retrying transient failures for up to
// a session timeout while the session lasts.
func (o *observer) rearm(ctx context.Context, arm func(context.Context) error) error {
	start := time.Now()
	for i := 0; ; i++ {
		err := arm(ctx)
		if err == nil || !transient(err) || o.d.conn.SessionID() != o.sid || time.Since(start) >= o.d.timeout() {
			return err
		}
		if err := backoff(ctx, i, o.d.timeout()/10); err != nil {
			return err
		}
	}
}

// armKey lists the queue with a child watch (an exists watch when the key
// node is missing), and watches the first node's data if it is not
// watched yet.
func (o *observer) armKey(ctx context.Context) error {
	d := o.d
	// A key node created and deleted again between the listing and the
	// exists is rare; a few rounds, then the caller retries.
	for range 3 {
		r, err := call(ctx, nil, d.timeout(), func() (childrenW, error) {
			children, _, ch, err := d.conn.ChildrenW(o.keyPath)
			return childrenW{children, ch}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			// No key node: wait for its creation. Left over, as Watch
			// ends, this watch fires when the key is next used.
			ok, err := call(ctx, nil, d.timeout(), func() (existsW, error) {
				ok, _, ch, err := d.conn.ExistsW(o.keyPath)
				return existsW{ok: ok, ch: ch}, err
			})
			if err != nil {
				return err
			}
			if ok.ok {
				// Created in between: the exists watch fires on its
				// deletion or data change; list it instead.
				continue
			}
			o.keyW, o.first = ok.ch, ""
			return nil
		}
		if err != nil {
			return err
		}
		o.keyW = r.ch
		q := queue(r.children)
		switch {
		case len(q) == 0:
			o.first = ""
		case q[0].name != o.first || o.firstW == nil:
			// A new first node (the old one is gone: nodes only ever
			// join at the end), or its watch fired.
			o.first = q[0].name
			return o.armFirst(ctx)
		}
		return nil
	}
	return errNoAnswer
}

// armFirst sets the data watch on the first node. A node gone already is
// not watched: the child watch set by the listing that showed it fires for
// its deletion.
func (o *observer) armFirst(ctx context.Context) error {
	if o.first == "" {
		return nil
	}
	d := o.d
	r, err := call(ctx, nil, d.timeout(), func() (getW, error) {
		_, stat, ch, err := d.conn.GetW(o.keyPath + "/" + o.first)
		return getW{stat: stat, ch: ch}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		o.first, o.firstW = "", nil
		return nil
	}
	if err != nil {
		return err
	}
	o.firstW = r.ch
	return nil
}

var _ driver.Observer = (*zkDriver)(nil)

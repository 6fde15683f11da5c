package zkdlock

import (
	"context"
	"sync/atomic"
	"time"

	planner "github.com/dlockdev/dlock/driver/queue"
	"github.com/go-zookeeper/zk"
)

// A listing is one getChildren of a key node, shared by every attempt of
// the Client that asked for it before it was sent. Each waiter must list
// the queue once when it joins, and the reply carries every waiter's name:
// with N waiters arriving on a Client, N separate listings move O(N²) bytes
// through the server and the connection (10,000 waiters on one key: about
// 2.4 GB) and parse as many names, which is what kept a long queue from
// ever draining. A listing sent after an attempt asked is as good for it as
// its own (it was sent after that attempt's create was answered), so the
// attempts of one Client that ask while a listing of the key is in flight
// all wait for the next one, sent as soon as that one returns: at most one
// listing per key and Client in flight, and one parse for all.
type listing struct {
	done chan struct{}   // closed when the fields below are set
	q    []lockNode      // the key's queue, sorted; shared: read only
	es   []planner.Entry // entries(q); shared: read only
	ms   []mark          // the lock-delay marks (see lockdelay.go)
	stat *zk.Stat        // the key node's
	sent time.Time       // when the request was sent
	sid  int64           // the session it was sent on
	err  error
}

// onListAsk, when set (by tests), is called by every listQueue.
var onListAsk atomic.Pointer[func(keyPath string)]

// listQueue returns the queue of keyPath from a listing sent after the
// call, waiting at most timeout (if > 0) for it.
func (d *zkDriver) listQueue(ctx context.Context, keyPath string, timeout time.Duration) (*listing, error) {
	if f := onListAsk.Load(); f != nil {
		(*f)(keyPath)
	}
	d.listMu.Lock()
	if d.listNext == nil {
		d.listNext = make(map[string]*listing)
		d.listBusy = make(map[string]bool)
	}
	l := d.listNext[keyPath]
	if l == nil {
		l = &listing{done: make(chan struct{})}
		if d.listBusy[keyPath] {
			d.listNext[keyPath] = l // sent when the one in flight returns
		} else {
			d.listBusy[keyPath] = true
			go d.sendListings(keyPath, l)
		}
	}
	d.listMu.Unlock()
	// Waited for here, not in a goroutine of call: sendListings sends it.
	var expired <-chan time.Time
	if timeout > 0 {
		t := getTimer(timeout)
		defer putTimer(t)
		expired = t.C
	}
	select {
	case <-l.done:
		return l, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-expired:
		return nil, errNoAnswer
	}
}

// sendListings sends l, then the listing of keyPath that attempts asked for
// meanwhile, if any, and so on. go-zookeeper answers every request, or fails
// it when the connection breaks or closes, so each returns.
func (d *zkDriver) sendListings(keyPath string, l *listing) {
	for l != nil {
		l.sid = d.conn.SessionID()
		l.sent = time.Now()
		children, stat, err := d.conn.Children(keyPath)
		if err == nil {
			l.q, l.ms, l.stat = queue(children), marks(children), stat
			l.es = entries(l.q)
		}
		l.err = err
		close(l.done)

		d.listMu.Lock()
		l = d.listNext[keyPath]
		delete(d.listNext, keyPath)
		if l == nil {
			delete(d.listBusy, keyPath)
		}
		d.listMu.Unlock()
	}
}

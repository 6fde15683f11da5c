package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// grant is a key held through a lock node at the head of its queue. It
// implements driver.Grant.
type grant struct {
	d         *zkDriver
	key       string
	path      string // the lock node
	sid       int64  // the session that owns the node
	token     uint64 // the node's creation zxid
	validFrom time.Time
	validity  time.Duration

	// proofMu guards the last answered request of this grant whose report
	// to the leader the next renewal should prove (see Renew).
	proofMu                  sync.Mutex
	proofSent, proofAnswered time.Time

	lost chan error // receives the reason once, when the watch says the node is gone

	// wmu guards the lost-lease watch that the watching goroutine
	// follows, which RenewBatch reads too (see renew.go): wch, its
	// channel, nil while the goroutine handles an event of it; wconn, the
	// connection (zkDriver.connGen) on which a read that found the node
	// ours set it, 0 when it was not so set (the attempt's watch, or an
	// unknown connection); taken, an event of wch that RenewBatch
	// received before the goroutine (which then finds wch closed and
	// empty).
	wmu   sync.Mutex
	wch   <-chan zk.Event
	wconn uint64
	taken zk.Event

	// lifeMu guards what decides whether the lease may have ended locally
	// while its node lives on (see forfeit.go): provedAt, when the last
	// successful Renew returned (at first, when the grant was made);
	// forfeited, set once the grant has given the node up, after which no
	// Renew succeeds; and gone, set when the node is known to be gone or no
	// longer ours (a loss reported by the watch).
	lifeMu    sync.Mutex
	provedAt  time.Time
	forfeited bool
	gone      bool
	forfeit   *time.Timer // runs onForfeit

	// publishes: the grant may write its node while held (an election's
	// leader, see Publish and rule.go's publishes).
	publishes bool
	// last: a lock granted with no node behind its own in the listing,
	// or a semaphore's permit, which its release removes with a plain
	// delete (see attempt.plainRelease and remove).
	last bool
	// dropKey: a lock granted alone in its queue, whose release deletes
	// the key node too (see attempt.take and remove), unless joined: the
	// grant's child watch saw the queue change, or the release found the
	// key node not empty.
	dropKey bool
	joined  atomic.Bool
	// mark is the path of the grant's lock-delay mark, "" without a
	// delay: its release deletes it with the node (see removeMarked).
	mark string
	// pubMu serialises Publish calls.
	pubMu sync.Mutex
	// verMu guards the node's data versions that are ours: version, that
	// of the last write of ours known to have landed (0, or a Publish's),
	// and pending, that of a Publish sent whose answer is not known (0:
	// none), with the data it wrote. Any other version is somebody else's write.
	verMu       sync.Mutex
	version     int32
	pending     int32
	pendingData [][]byte

	// ctx is cancelled by Release, which stops the watching goroutine.
	ctx    context.Context
	cancel context.CancelFunc
}

// newGrant makes the grant of the node at path, unwritten since its
// create, and starts following watch, the node's lost-lease watch. With
// last, it releases with a plain delete, and with dropKey the key node with
// it (see attempt.take).
func newGrant(d *zkDriver, key, path string, sid, czxid int64, publishes, last, dropKey bool, validFrom time.Time, watch <-chan zk.Event) *grant {
	ctx, cancel := context.WithCancel(context.Background())
	g := &grant{
		d:         d,
		key:       key,
		path:      path,
		sid:       sid,
		token:     uint64(czxid),
		publishes: publishes,
		last:      last,
		dropKey:   dropKey,
		validFrom: validFrom,
		validity:  d.timeout(),
		lost:      make(chan error, 1),
		wch:       watch,
		ctx:       ctx,
		cancel:    cancel,
	}
	// The first renewal proves the report of the last request the session
	// had answered when the key was granted.
	g.proofSent, g.proofAnswered, _ = d.heard.last(sid)
	g.lifeMu.Lock()
	g.provedAt = time.Now()
	g.forfeit = time.AfterFunc(g.validity, g.onForfeit)
	g.lifeMu.Unlock()
	go g.watch()
	return g
}

// Token is the creation zxid of the lock node. Zxids are global to the
// ensemble and only go up (a new leader starts a new epoch in the high 32
// bits), and a later grant always belongs to a later node, so the token
// keeps increasing even when the key node is deleted and recreated and
// sequence numbers start again from zero. In every mode: grants follow
// queue order (rule.go: a node is granted only once every node ahead of
// it is, or has gone, and a node ahead is an earlier node with a smaller
// creation zxid), so a reader or permit granted after another holds a
// greater token; readers or permits granted by the same release hold
// tokens in their queue order, which may differ from the order in which
// their owners learn of the grants.
func (g *grant) Token() uint64 { return g.token }

// ValidFrom is when a request of the session that the server answered was
// sent (the listing that found the node at the head of the queue, or the
// latest answered request of the session): the session was alive after
// that moment. On a server stated standalone, which keeps a live session
// for at least its timeout after the last request it received, the lease
// counts from it; otherwise (an ensemble, or a server found standalone) the
// engine counts from HeardFrom, and renews on the schedule of ValidFrom.
func (g *grant) ValidFrom() time.Time { return g.validFrom }

// HeardFrom implements driver.LaggingGrant: the last moment the server
// that expires the session — the leader of an ensemble — is known to have
// heard from it (see heard). The zero time once the session is no longer
// the grant's.
func (g *grant) HeardFrom() time.Time {
	t, _ := g.d.heard.since(g.sid)
	return t
}

// Validity is the session timeout the server granted.
func (g *grant) Validity() time.Duration { return g.validity }

// Lost reports a deleted node or an expired or closed session.
func (g *grant) Lost() <-chan error { return g.lost }

func (g *grant) report(err error) {
	g.lifeMu.Lock()
	g.gone = true // nothing of ours for onForfeit to remove
	g.lifeMu.Unlock()
	g.send(err)
	if g.mark != "" {
		g.d.goJanitor(g.endMark)
	}
}

// send hands err to Lost, unless a reason is there already.
func (g *grant) send(err error) {
	select {
	case g.lost <- err:
	default:
	}
}

// watch follows the lost-lease watch, wch (at first the attempt's: an
// exists watch on the lock node, or a child watch on the key node; then a
// getData watch on the node, set by rearm or by RenewBatch): it fires when the node is deleted (by an
// operator or a bug: we never delete it while held), and go-zookeeper ends
// it with ErrSessionExpired when the session expires and with ErrClosing
// when the Conn is closed. A key node deleted (the child watch) had no
// children left, ours included. A write to the node's data is a loss too:
// the waiter behind takes any write to its predecessor for a release (see
// Release), so it is taking the key; except on a grant that writes its
// own node, an election's leader (Publish): there the watch is set again,
// and the version and data the node has then tell whose write it was (see
// ours). Other events
// (another child of the key node came or went) only need a watch on the
// lock node set again.
func (g *grant) watch() {
	for {
		g.wmu.Lock()
		ch := g.wch
		g.wmu.Unlock()
		var ev zk.Event
		select {
		case <-g.ctx.Done():
			return
		case e, ok := <-ch:
			g.wmu.Lock()
			if g.wch != ch {
				// RenewBatch replaced this watch with a data watch on
				// the node, set by a read that saw what came before: it
				// has fired too if what fired this one matters (a data
				// watch on the same node fires with it; a child watch on
				// the key node for our node's deletion, or the
				// session's end).
				g.wmu.Unlock()
				continue
			}
			if !ok {
				e = g.taken // RenewBatch received it first
			}
			g.wch, g.wconn, g.taken = nil, 0, zk.Event{}
			g.wmu.Unlock()
			ev = e
		}
		switch {
		case ev.Type == zk.EventNodeDeleted:
			g.report(fmt.Errorf("lock node %s was deleted by somebody else", g.nodeName()))
			return
		case ev.Type == zk.EventNodeDataChanged && !g.publishes:
			g.report(g.overwritten())
			return
		case ev.Type == zk.EventNotWatching && errors.Is(ev.Err, zk.ErrSessionExpired):
			g.report(g.sessionGone())
			return
		case ev.Type == zk.EventNotWatching && errors.Is(ev.Err, zk.ErrClosing):
			g.report(fmt.Errorf("the ZooKeeper connection was closed: %w", zk.ErrClosing))
			return
		case ev.Type == zk.EventNodeChildrenChanged:
			g.joined.Store(true) // the key node is not ours alone any more
		}
		if !g.rearm() {
			return
		}
	}
}

// rearm sets the watch again, reporting the loss if the node has gone. It
// reports whether the watch is set.
func (g *grant) rearm() bool {
	for i := 0; ; i++ {
		conn := g.d.connGen()
		r, err := call(g.ctx, nil, g.validity, func() (getW, error) {
			data, stat, ch, err := g.d.conn.GetW(g.path)
			return getW{stat, ch, data}, err
		})
		switch {
		case err == nil && r.stat.EphemeralOwner == g.sid && g.ours(r.stat.Version, r.data, true):
			g.wmu.Lock()
			g.wch, g.wconn = r.ch, g.d.sameConn(conn)
			g.wmu.Unlock()
			return true
		case err == nil && r.stat.EphemeralOwner == g.sid:
			g.report(g.overwritten())
			return false
		case err == nil:
			g.report(g.sessionGone())
			return false
		case errors.Is(err, zk.ErrNoNode):
			g.report(fmt.Errorf("lock node %s was deleted", g.nodeName()))
			return false
		case errors.Is(err, zk.ErrSessionExpired):
			g.report(g.sessionGone())
			return false
		case errors.Is(err, zk.ErrClosing):
			g.report(fmt.Errorf("the ZooKeeper connection was closed: %w", zk.ErrClosing))
			return false
		}
		if backoff(g.ctx, i, g.validity/10) != nil {
			return false
		}
	}
}

// overwritten is the error for a grant whose lock node's data was written
// after its grant (its data version is no longer the grant's): only a
// release does that, so the waiter behind may have taken the key.
func (g *grant) overwritten() error {
	return fmt.Errorf("lock node %s was written by somebody else, which hands the key to the next waiter", g.nodeName())
}

// sessionGone is the error for a grant whose session has expired: the
// server deleted its node with it.
func (g *grant) sessionGone() error {
	return fmt.Errorf("session 0x%x expired and its lock node %s with it: %w", g.sid, g.nodeName(), zk.ErrSessionExpired)
}

// Renew proves that the grant still holds: the session is the one that owns
// the node, and the node exists, unwritten by anybody else (a write is a
// release to the waiter behind, see Release; see ours for Publish's). It
// extends nothing on the server (the session's pings do that). It is a
// RenewBatch of one grant: see renew.go for the proof (a sync, or the
// standalone check, and the grant's watch or a read of its node) and for
// what it proves of the lease's validity.
func (g *grant) Renew(ctx context.Context) error {
	if g.d.conn.SessionID() != g.sid {
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, g.sessionGone())
	}
	if errs := g.d.renew(ctx, g.sid, []*grant{g}); errs != nil {
		return errs[0]
	}
	return nil
}

func (g *grant) renewErr(err error) error {
	if errors.Is(err, zk.ErrSessionExpired) {
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, g.sessionGone())
	}
	return g.d.wrapErr("renew "+g.nodeName(), err)
}

var _ driver.LaggingGrant = (*grant)(nil)

type getW struct {
	stat *zk.Stat
	ch   <-chan zk.Event
	data []byte // where the caller needs it
}

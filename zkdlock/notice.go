package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// writeNotice writes the grant notice of a semaphore's entry granted with
// a node behind it (see attempt.take): data, the entry's metadata, again,
// by a setData on its own node that expects data version 0, the create's.
// The waiter limit places behind watches the node for it: a data change,
// or a version above 0 when it sets its watch, tells it that it is now one
// of the first limit waiters, and it lists the queue to watch the holders
// (rule.go's plan, Notice). Those waiters watch this node too, once it
// holds; one that set its watch before the notice takes the change for
// "read again", never for a release (see waitAny): only a node written
// before the watch was set has its release as its next write.
//
// It runs after the grant has returned, off the hand-off path. That is
// safe because nobody takes the notice for a grant or a release: the
// waiter limit places behind only lists the queue again, whose count of
// nodes decides, and a first waiter reads the node again. A notice that
// comes late, or never (the grant is released first, the session ends, the
// server refuses the write), only delays the waiter limit places behind:
// it still learns of this node's deletion, and lists then. What must hold is that
// the grant takes its own write for its own: the notice is in doubt
// (grant.inDoubt) before the grant's watch starts, so the watch, set
// before the write, and the renewals accept version 1 with this data (see
// ours), and CheckHeld waits for the answer (checkVersion).
//
// The notice is written once: a lost answer is resolved by writing again
// at version 0, whose ErrBadVersion then says that a write landed; a read
// tells whether it was ours.
func (g *grant) writeNotice(data []byte) {
	defer close(g.noticed)
	d := g.d
	// Release ends it, and so does Client.Close: a lease lost but not
	// released must not keep it trying.
	ctx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	defer context.AfterFunc(d.ctx, cancel)()
	for i := 0; ; i++ {
		if d.conn.SessionID() != g.sid {
			return // the session ended, and the node with it: the watch reports it
		}
		sent := time.Now()
		// A multi of one setData: Conn has no plain setData.
		stat, err := call(ctx, nil, g.validity, func() (*zk.Stat, error) {
			rs, err := d.conn.Multi(&zk.SetDataRequest{Path: g.path, Data: data, Version: 0})
			if err == nil && (len(rs) != 1 || rs[0].Error != nil || rs[0].Stat == nil) {
				err = fmt.Errorf("unexpected reply to a multi: %+v", rs)
			}
			if err != nil && len(rs) == 1 && rs[0].Error != nil {
				err = rs[0].Error
			}
			if err != nil {
				return nil, err
			}
			return rs[0].Stat, nil
		})
		switch {
		case err == nil:
			d.noteViaLeader(g.sid, sent) // a write goes through the leader
			g.landed(stat.Version)
			return
		case errors.Is(err, zk.ErrBadVersion):
			if done := g.settleNotice(ctx, data); done {
				return
			}
		case errors.Is(err, zk.ErrNoAuth):
			// Refused (Options.ACL does not let the owner write its
			// node): nothing landed, so a version 1 is somebody else's.
			// The waiter behind learns of this node only when it goes.
			g.landed(0)
			return
		case !transient(err):
			// Released or closed (ctx ended), the node or the session
			// gone, or the Conn closed: nothing to write, or the watch
			// reports the loss.
			return
		}
		if backoff(ctx, i, g.validity/10) != nil {
			return
		}
	}
}

// settleNotice reads the node after its notice failed with ErrBadVersion:
// it was written since the grant, by a notice of ours whose answer was lost
// or by somebody else, and reports the loss in the second case. It
// reports false when the read failed on a connection problem: the notice
// is tried again.
func (g *grant) settleNotice(ctx context.Context, data []byte) (done bool) {
	r, err := call(ctx, nil, g.validity, func() (getW, error) {
		data, stat, err := g.d.conn.Get(g.path)
		return getW{stat: stat, data: data}, err
	})
	switch {
	case err != nil:
		return !transient(err) // gone, closed, released: the watch tells
	case r.stat.EphemeralOwner != g.sid:
		return true // the session ended: the watch reports it
	case !g.ours(r.stat.Version, r.data, true):
		g.report(g.overwritten())
	}
	return true
}

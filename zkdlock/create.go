package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlockdev/dlock/driver"
	planner "github.com/dlockdev/dlock/driver/queue"
	"github.com/go-zookeeper/zk"
)

// preview is the listing stepQueue makes before the create: the queue as
// it was, and the key node's identity and child version then.
type preview struct {
	q        []lockNode
	es       []planner.Entry // entries(q)
	ms       []mark          // the lock-delay marks
	noNode   bool            // there was no key node
	czxid    int64           // the key node's creation zxid
	cversion int32           // its child version: one more for every child created or deleted
}

// after reports whether the queue, once our create (whose multi returned
// ks, the key node's Stat as of the create) was applied, is exactly the
// preview's queue and our node: when the key node is the one listed and
// its child version went up by one, the only child created or deleted in
// between was ours. (With no key node at the listing: a key node whose
// only child change ever was ours.) The listing was answered before the
// create was sent, so the create's transaction comes after the state the
// listing showed, whichever server answered it.
func (p *preview) after(ks *zk.Stat) bool {
	if p.noNode {
		return ks.Cversion == 1
	}
	return ks.Czxid == p.czxid && ks.Cversion == p.cversion+1
}

// queue is stepQueue: the pre-listing, then the create. The pre-listing
// is skipped when the Client's last listing of the key showed it free, or
// in use as the attempt's kind: the kind is then most likely right, and
// the lock's costs stay what they were before kinds (3 requests for an
// uncontended cycle, 5 for a contended grant, where the pre-listing would
// add one whenever somebody joins or leaves before the create). A key
// that meanwhile emptied and went to another kind is found by the listing
// after the create, and the node deleted before the mismatch is reported:
// created and deleted, not "nothing created", in that case only. When the
// Client's own release of a lock of this kind deleted the key node
// (keyHint.gone), the key node is made first, and the create's Stat says
// whether the queue is ours alone, as after a pre-listing that found no key
// node.
func (a *attempt) queue(ctx context.Context) error {
	d := a.d
	h := d.hint(a.keyPath)
	if a.pre == nil && h.gone && h.label == a.label {
		// Our own release deleted the key node: make it again, without
		// listing the queue it cannot have (go-zookeeper's Multi cannot
		// carry this create: it fails to read the server's answer to a
		// container create in a multi, which the server applies). Another
		// Client may have made it meanwhile and queued in it: the create's
		// Stat says so (see preview.after).
		d.setKeep(a.keyPath)
		if err := a.ensureKeyNode(ctx); err != nil {
			return a.retry(ctx, "create the key node", err)
		}
		a.pre = &preview{noNode: true}
	} else if a.pre == nil && !h.free && h.label != a.label {
		l, err := d.listQueue(ctx, a.keyPath, a.callTimeout())
		switch {
		case errors.Is(err, zk.ErrNoNode):
			// No key node: make it now, not after a create that fails
			// for want of it (a failed multi is a write of the server's
			// log too).
			if err := a.ensureKeyNode(ctx); err != nil {
				return a.retry(ctx, "create the key node", err)
			}
			a.pre = &preview{noNode: true}
		case err != nil:
			return a.retry(ctx, "list the queue", err)
		default:
			d.noteAlive(l.sid, l.sent)
			d.setHint(a.keyPath, l.q, false)
			p := a.decide(l.es, len(l.es))
			if p.Verdict == planner.Mismatch {
				a.clean = a.created == 0
				return driver.KindMismatch(l.q[p.Target].label, a.req.Kind, a.req.Limit)
			}
			if !a.req.Wait && p.Verdict != planner.Granted {
				a.clean = a.created == 0
				return a.locked(l.q, len(l.q))
			}
			a.pre = &preview{q: l.q, es: l.es, ms: l.ms, czxid: l.stat.Czxid, cversion: l.stat.Cversion}
		}
	}
	sent := time.Now()
	ks, err := a.create(ctx)
	if err != nil {
		if errors.Is(err, zk.ErrNoNode) && a.indexMissing {
			// The root's lock-delay index does not exist yet: the
			// first mark under this root, or an operator deleted it.
			a.indexMissing = false
			if err := d.ensurePath(ctx, d.indexPath()); err != nil {
				return a.retry(ctx, "create the lock-delay index", err)
			}
			return nil
		}
		if errors.Is(err, zk.ErrNoNode) {
			// The key node does not exist (yet, or any more: the
			// server deletes empty containers).
			if err := a.ensureKeyNode(ctx); err != nil {
				return a.retry(ctx, "create the key node", err)
			}
			return nil
		}
		a.pre = nil
		if a.node == nodeUnsure {
			a.step = stepList
		}
		return a.retry(ctx, "create a lock node", err)
	}
	a.fails = 0
	pre := a.pre
	a.pre = nil
	a.step = stepList
	if pre != nil && a.node == nodeKnown && pre.after(ks) {
		a.q = append(pre.q[:len(pre.q):len(pre.q)], a.me)
		a.es = append(pre.es[:len(pre.es):len(pre.es)], planner.Entry{Mode: a.me.mode, Label: a.me.label})
		a.marks = pre.ms
		a.listSent = sent
		a.step = stepPlace
	}
	return nil
}

// ensureKeyNode creates the key's node as a container, so that the server
// deletes it once its last child is gone, and the root if that is missing.
func (a *attempt) ensureKeyNode(ctx context.Context) error {
	d := a.d
	_, err := call(ctx, nil, a.callTimeout(), func() (string, error) {
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

// create adds this attempt's node to the queue, in a multi with a setData
// on the key node: one transaction, one zxid, so the key node's Stat in the
// reply, which create returns, gives the new node's creation zxid. The
// request is counted in a.creates until it completes, even when ctx ends
// first. A create that fails for any reason but a missing key node may
// have made a node: the next listing looks for it (nodeUnsure).
func (a *attempt) create(ctx context.Context) (*zk.Stat, error) {
	d := a.d
	sid := d.conn.SessionID()
	a.created++
	sent := time.Now()
	if a.createOps[0] == nil {
		// create -e -s: ZooKeeper appends the sequence number to the name.
		a.createReq = zk.CreateRequest{Path: a.createPath, Data: a.req.Metadata, Acl: d.acl, Flags: zk.FlagEphemeralSequential}
		a.markReq = zk.SetDataRequest{Path: a.keyPath, Data: nil, Version: -1}
		a.createOps = [2]any{&a.createReq, &a.markReq}
	}
	ops := a.createOps[:]
	if a.req.LockDelay > 0 && !a.marked {
		if a.delayOps[0] == nil {
			// The lock-delay's mark, persistent, and its entry in
			// the root's index, in the same transaction (see
			// lockdelay.go and delayindex.go).
			a.delayReq = zk.CreateRequest{Path: a.markPath(), Data: a.req.Metadata, Acl: d.acl, Flags: 0}
			a.indexReq = zk.CreateRequest{Path: d.entryPath(a.keyPath, a.delayReq.Path[len(a.keyPath)+1:]), Acl: d.acl, Flags: 0}
			a.delayOps = [4]any{&a.createReq, &a.markReq, &a.delayReq, &a.indexReq}
		}
		ops = a.delayOps[:]
	}
	rs, err := call(ctx, &a.creates, a.callTimeout(), func() ([]zk.MultiResponse, error) {
		return d.conn.Multi(ops...)
	})
	// Only the index entry's create failed: no index node.
	a.indexMissing = len(ops) == len(a.delayOps) && indexMissing(rs, err)
	if err == nil && (len(rs) != len(ops) || rs[0].Error != nil || rs[1].Error != nil || rs[1].Stat == nil) {
		err = fmt.Errorf("unexpected reply to a multi: %+v", rs)
	}
	if err != nil {
		if errors.Is(err, zk.ErrNodeExists) && len(ops) == len(a.delayOps) {
			// Our mark is there already, from a create whose reply was
			// lost or whose node went with its session: keep it.
			a.created--
			a.marked = true
			return a.create(ctx)
		}
		if errors.Is(err, zk.ErrNoNode) {
			a.created-- // answered: no key node, so no node made
		} else {
			a.node = nodeUnsure
		}
		return nil, err
	}
	path := rs[0].String
	n, ok := parseLockNode(path[strings.LastIndex(path, "/")+1:])
	if !ok {
		a.node = nodeUnsure
		return nil, fmt.Errorf("create returned %q, not a lock node", path)
	}
	a.forget()
	a.reclaim = a.req.LockDelay > 0 && len(ops) != len(a.delayOps)
	a.marked = len(ops) == len(a.delayOps) || a.marked
	a.me, a.node, a.path = n, nodeAdopted, path
	if sid != 0 && d.conn.SessionID() == sid {
		// Answered on the session it was sent on (session ids never come
		// back): the node is that session's.
		a.node, a.sid, a.czxid = nodeKnown, sid, rs[1].Stat.Mzxid
		// A write, so it went through the leader (see heard).
		d.noteViaLeader(sid, sent)
	}
	return rs[1].Stat, nil
}

package zkdlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// maxInDoubt bounds the data of the Publish calls whose answer was lost
// that a grant remembers (see Publish). Forgetting one is conservative: if
// it landed, the grant takes it for somebody else's write and is lost.
const maxInDoubt = 8

// Publish implements driver.Publisher for an election's leader: a setData
// on the grant's own node, conditional on the node's data version being
// that of the grant's last write known to have landed. So it only ever
// writes this grant's node (its name carries the grant's owner, a random
// 128-bit id, and a sequence number), only while the node exists (it is
// ephemeral: it exists only while the session that created it lives, so a
// node that is there is still ours) and only over a write of ours: a node
// that somebody else wrote fails with ErrBadVersion, and then with
// driver.ErrNotHeld (the grant's watch reports the loss).
//
// A lost reply leaves the write in doubt: it may have landed or not. Every
// write in doubt expects the same version, the last known one, so at most
// one of them can land, and it makes the version one more; the grant
// remembers that version and the data of the writes in doubt. A later
// Publish (the caller's retry) that fails with ErrBadVersion reads the
// node: the version in doubt with the data of one of ours is our own
// write, now known to have landed; if it is the data asked for, Publish
// succeeds without writing again. Requests of a session reach the server
// in order (and a previous server's are refused once the session moved),
// so no write in doubt can land after a later one.
//
// It extends nothing: the lease keeps counting from its renewals.
//
// Only an election's grant publishes: the waiter behind a lock's node, or
// a writer's, takes a data change of it for a release, and so may a
// semaphore's waiter (permits.go); so a write of theirs would hand the
// key over. An election's candidate instead reads its predecessor again
// after a data change (plan.publishes): gone is a release, there a Publish.
// The data is the caller's metadata (the JSON with the published value),
// as the create wrote it; an election's node is never written otherwise,
// but by the release, in the transaction that deletes it.
func (g *grant) Publish(ctx context.Context, metadata []byte) error {
	if !g.publishes {
		return fmt.Errorf("zkdlock: lock node %s: %w: only an election's leader publishes (the waiter behind a lock node takes a write to it for a release)", g.nodeName(), errors.ErrUnsupported)
	}
	g.pubMu.Lock()
	defer g.pubMu.Unlock()
	d := g.d
	// Two rounds at most: the second after learning that a write in doubt
	// of an earlier call landed, with other data.
	for range 2 {
		if g.ctx.Err() != nil {
			return fmt.Errorf("%w: lock node %s was released", driver.ErrNotHeld, g.nodeName())
		}
		if d.conn.SessionID() != g.sid {
			return fmt.Errorf("%w: %w", driver.ErrNotHeld, g.sessionGone())
		}
		expect := g.inDoubt(metadata)
		stat, err := call(ctx, nil, g.validity, func() (*zk.Stat, error) {
			// A multi of one setData: Conn has no plain setData.
			rs, err := d.conn.Multi(&zk.SetDataRequest{Path: g.path, Data: metadata, Version: expect})
			if err == nil && (len(rs) != 1 || rs[0].Error != nil || rs[0].Stat == nil) {
				err = fmt.Errorf("unexpected reply to a multi: %+v", rs)
			}
			if err == nil {
				return rs[0].Stat, nil
			}
			if len(rs) == 1 && rs[0].Error != nil {
				err = rs[0].Error
			}
			return nil, err
		})
		switch {
		case err == nil:
			g.landed(stat.Version)
			return nil
		case errors.Is(err, zk.ErrNoNode):
			return fmt.Errorf("%w: lock node %s is gone (session expired or node deleted)", driver.ErrNotHeld, g.nodeName())
		case errors.Is(err, zk.ErrSessionExpired):
			return fmt.Errorf("%w: %w", driver.ErrNotHeld, g.sessionGone())
		case errors.Is(err, zk.ErrBadVersion):
			done, err := g.settleDoubt(ctx, metadata)
			if done || err != nil {
				return err
			}
			continue // ours landed, with other data: write again
		}
		return d.wrapErr("publish on "+g.nodeName(), err)
	}
	return fmt.Errorf("%w: lock node %s keeps changing under us", driver.ErrNotHeld, g.nodeName())
}

// settleDoubt reads the node after a Publish failed with ErrBadVersion:
// the node was written since the grant's last known write. It reports
// done when the write was one of ours in doubt with data metadata (the
// Publish asked for has landed), nil, false when it was another write of
// ours (Publish writes again), and ErrNotHeld when the node is gone or the
// write was not ours.
func (g *grant) settleDoubt(ctx context.Context, metadata []byte) (done bool, err error) {
	d := g.d
	type node struct {
		data []byte
		stat *zk.Stat
	}
	r, err := call(ctx, nil, g.validity, func() (node, error) {
		data, stat, err := d.conn.Get(g.path)
		return node{data, stat}, err
	})
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return false, fmt.Errorf("%w: lock node %s is gone (session expired or node deleted)", driver.ErrNotHeld, g.nodeName())
	case err != nil:
		return false, d.wrapErr("read "+g.nodeName(), err)
	case r.stat.EphemeralOwner != g.sid:
		return false, fmt.Errorf("%w: %w", driver.ErrNotHeld, g.sessionGone())
	}
	if !g.ours(r.stat.Version, r.data, true) {
		return false, fmt.Errorf("%w: %w", driver.ErrNotHeld, g.overwritten())
	}
	return bytes.Equal(r.data, metadata), nil
}

// inDoubt records metadata as a write in doubt until its answer comes, and
// returns the version it must expect: the last known write's.
func (g *grant) inDoubt(metadata []byte) int32 {
	g.verMu.Lock()
	defer g.verMu.Unlock()
	g.pending = g.version + 1
	if len(g.pendingData) >= maxInDoubt {
		g.pendingData = g.pendingData[1:]
	}
	g.pendingData = append(g.pendingData, bytes.Clone(metadata))
	return g.version
}

// landed records that a write of ours made version v: nothing is in doubt
// any more (every write in doubt expected the version before v).
func (g *grant) landed(v int32) {
	g.verMu.Lock()
	defer g.verMu.Unlock()
	g.version, g.pending, g.pendingData = max(g.version, v), 0, nil
}

// ours reports whether the node's data version v is that of a write of
// ours: the last known one or an earlier one (a read sent before our
// latest write and answered after it: every version up to the last known
// one is ours, since each of our writes expected the one before, and the
// first is the create's), or the one in doubt with the data (read with
// the version) of one of the writes in doubt, which is then recorded as
// landed. Renew reads no data (exists): it takes the version in doubt for
// ours, records nothing, and leaves the verdict to the grant's watch,
// which fires for every write and reads the data (see grant.rearm).
func (g *grant) ours(v int32, data []byte, haveData bool) bool {
	g.verMu.Lock()
	defer g.verMu.Unlock()
	if v <= g.version {
		return true
	}
	if g.pending == 0 || v != g.pending {
		return false
	}
	if !haveData {
		return true
	}
	for _, p := range g.pendingData {
		if bytes.Equal(p, data) {
			g.version, g.pending, g.pendingData = v, 0, nil
			return true
		}
	}
	return false
}

var _ driver.Publisher = (*grant)(nil)

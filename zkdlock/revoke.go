package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// revokeTries bounds how often Revoke looks again when a holder it meant
// to revoke left between its listing and its delete.
const revokeTries = 5

var _ driver.Revoker = (*zkDriver)(nil)

// Revoke implements driver.Revoker: it deletes the holders' lock nodes from
// this Client's session, in one multi, so that the revoked holders and the
// waiters behind them see what they see when a holder's session expires.
// The holder's lost-lease watch fires with the deletion (its lease ends at
// once, and its Release finds no node: ErrNotHeld); the waiter watching
// the node is woken by the deletion, and is granted without a request when
// the node headed its listing, else lists again (see attempt.waitFor). A
// waiter's node is never deleted, so the queue keeps its order. The next
// holder's token, its node's creation zxid, is greater than the revoked
// node's: its node was created later, and zxids only go up.
//
// A revoked holder's lock-delay mark stays (see lockdelay.go), with the
// time its delay ends, counted from before the revoke was sent; a janitor
// of this Client deletes it then (reapMark), if the Client lives.
//
// A sync comes first, so that the listing shows every grant the leader had
// made when Revoke was called, whichever server answers.
func (d *zkDriver) Revoke(ctx context.Context, key string, token uint64) ([]driver.Entry, error) {
	path := d.keyPath(key)
	if _, err := call(ctx, nil, d.timeout(), func() (string, error) { return d.conn.Sync(path) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, d.wrapErr("sync before a revoke", err)
	}
	for i := 0; ; i++ {
		info, in, err := d.inspect(ctx, key)
		if err != nil {
			return nil, err
		}
		var (
			ops     []any
			revoked []driver.Entry
			reaped  []noted // the revoked holders' marks
		)
		for j, h := range info.Holders[in.orphans:] {
			if token != 0 && h.Token != token {
				continue
			}
			// Delete the node named after its owner and its sequence:
			// nobody else's, even when sent late.
			ops = append(ops, &zk.DeleteRequest{Path: path + "/" + in.holders[j].name, Version: -1})
			if m, ok := markOf(in.marks, in.holders[j].owner); ok {
				// Its mark stays, an orphan: the next grantee sits
				// out the delay. Write when it ends, for Inspect.
				until := time.Now().Add(m.delay)
				ops = append(ops, &zk.SetDataRequest{Path: path + "/" + m.name, Data: untilData(until, h.Metadata), Version: -1})
				reaped = append(reaped, noted{m, until})
			}
			revoked = append(revoked, h)
		}
		if len(ops) == 0 {
			if token != 0 {
				return nil, fmt.Errorf("%w: no holder has fencing token %d", driver.ErrNotHeld, token)
			}
			return nil, nil
		}
		_, err = call(ctx, nil, d.timeout(), func() ([]zk.MultiResponse, error) { return d.conn.Multi(ops...) })
		if errors.Is(err, zk.ErrNoNode) && i < revokeTries-1 {
			// A holder left meanwhile; the multi, all or nothing,
			// deleted nobody: look again.
			continue
		}
		if err != nil {
			return nil, d.wrapErr(fmt.Sprintf("revoke %d holder(s) of key %q", len(revoked), key), err)
		}
		for _, n := range reaped {
			d.reapMark(path, n.mark, n.until)
		}
		return revoked, nil
	}
}

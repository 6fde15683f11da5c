package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// Inspect implements driver.Inspector: the lock nodes of the key in sequence
// order, with the metadata each stores. The kind and limit are those the
// first node's name carries; the holders are the nodes the grant rule
// admits (a prefix of the queue, see rule.go), each with its token, its
// creation zxid; the rest wait. TTL is unknown (-1): a node lives as long
// as its owner's session, whose timeout only the owner knows. An entry
// with a lock-delay shows it (Entry.LockDelay); one that ended without a
// release and whose delay is not over yet is shown as a holder ahead of
// the nodes, with no metadata, and DelayedUntil says when its delay ends
// (see lockdelay.go).
func (d *zkDriver) Inspect(ctx context.Context, key string) (*driver.LockInfo, error) {
	info, _, err := d.inspect(ctx, key)
	return info, err
}

// inspected is what inspect read besides the LockInfo: the live holders'
// nodes, in the order of the LockInfo's Holders after its first orphans
// (ended entries still in their lock-delay, see lockdelay.go), and the
// key's lock-delay marks.
type inspected struct {
	holders []lockNode
	orphans int
	marks   []mark
}

// inspect is Inspect, which also returns what Revoke needs.
func (d *zkDriver) inspect(ctx context.Context, key string) (*driver.LockInfo, inspected, error) {
	var in inspected
	path := d.keyPath(key)
	info := &driver.LockInfo{Key: key, Limit: 1}
	children, err := call(ctx, nil, d.timeout(), func() ([]string, error) {
		children, _, err := d.conn.Children(path)
		return children, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return info, in, nil
	}
	if err != nil {
		return nil, in, d.wrapErr("list the queue", err)
	}
	q := queue(children)
	in.marks = marks(children)
	limit := 1
	if len(q) > 0 {
		kind, l, err := driver.ParseKindLabel(q[0].label)
		if err != nil {
			return nil, in, fmt.Errorf("zkdlock: node %s: %w", q[0].name, err) // parseLockNode accepts no such label
		}
		info.Kind, info.Limit, limit = kind, l, l
	}
	ended, os, err := d.delayInfo(ctx, path, in.marks, q, info)
	if err != nil {
		return nil, in, err
	}
	var (
		left    []lockNode // the nodes still there when read
		entries []driver.Entry
	)
	for _, n := range q {
		type node struct {
			data []byte
			stat *zk.Stat
		}
		r, err := call(ctx, nil, d.timeout(), func() (node, error) {
			data, stat, err := d.conn.Get(path + "/" + n.name)
			return node{data, stat}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // it left while we looked
		}
		if err != nil {
			return nil, in, d.wrapErr("read "+n.name, err)
		}
		left = append(left, n)
		e := driver.Entry{Token: uint64(r.stat.Czxid), Metadata: r.data, Since: time.UnixMilli(r.stat.Ctime), TTL: -1, Mode: n.mode}
		if m, ok := markOf(in.marks, n.owner); ok {
			e.LockDelay = m.delay
		}
		entries = append(entries, e)
	}
	// The orphans hold ahead of every node until their delay is over.
	granted := grantedBehind(os, left, limit)
	info.Holders = append(ended, entries[:granted]...)
	info.Waiters = entries[granted:]
	for i := range info.Waiters {
		info.Waiters[i].Token = 0
	}
	in.holders, in.orphans = left[:granted], len(ended)
	return info, in, nil
}

// List implements driver.Inspector: it lists the root's children, keeps the
// key nodes whose key starts with prefix, and inspects each.
func (d *zkDriver) List(ctx context.Context, prefix string) ([]*driver.LockInfo, error) {
	children, err := call(ctx, nil, d.timeout(), func() ([]string, error) {
		children, _, err := d.conn.Children(d.root)
		return children, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, d.wrapErr("list "+d.root, err)
	}
	var keys []string
	for _, c := range children {
		if key, ok := unescapeKey(c); ok && strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	var out []*driver.LockInfo
	for _, key := range keys {
		info, err := d.Inspect(ctx, key)
		if err != nil {
			return nil, err
		}
		if len(info.Holders) > 0 || len(info.Waiters) > 0 {
			out = append(out, info)
		}
	}
	return out, nil
}

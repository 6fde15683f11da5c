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
// as its owner's session, whose timeout only the owner knows.
func (d *zkDriver) Inspect(ctx context.Context, key string) (*driver.LockInfo, error) {
	info, _, err := d.inspect(ctx, key)
	return info, err
}

// inspect is Inspect, which also returns the holders' nodes, in the order
// of info.Holders.
func (d *zkDriver) inspect(ctx context.Context, key string) (*driver.LockInfo, []lockNode, error) {
	path := d.keyPath(key)
	info := &driver.LockInfo{Key: key, Limit: 1}
	children, err := call(ctx, nil, d.timeout(), func() ([]string, error) {
		children, _, err := d.conn.Children(path)
		return children, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return info, nil, nil
	}
	if err != nil {
		return nil, nil, d.wrapErr("list the queue", err)
	}
	q := queue(children)
	if len(q) == 0 {
		return info, nil, nil
	}
	kind, limit, err := driver.ParseKindLabel(q[0].label)
	if err != nil {
		return nil, nil, fmt.Errorf("zkdlock: node %s: %w", q[0].name, err) // parseLockNode accepts no such label
	}
	info.Kind, info.Limit = kind, limit
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
			return nil, nil, d.wrapErr("read "+n.name, err)
		}
		left = append(left, n)
		entries = append(entries, driver.Entry{Token: uint64(r.stat.Czxid), Metadata: r.data, Since: time.UnixMilli(r.stat.Ctime), TTL: -1, Mode: n.mode})
	}
	granted := grantedPrefix(left, limit)
	info.Holders = entries[:granted:granted]
	info.Waiters = entries[granted:]
	for i := range info.Waiters {
		info.Waiters[i].Token = 0
	}
	return info, left[:granted], nil
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

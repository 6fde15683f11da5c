package zkdlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// Inspect implements driver.Inspector: the lock nodes of the key in sequence
// order, with the metadata each stores. The first is the holder, whose token
// is its creation zxid. TTL is unknown (-1): a node lives as long as its
// owner's session, whose timeout only the owner knows.
func (d *zkDriver) Inspect(ctx context.Context, key string) (*driver.LockInfo, error) {
	path := d.keyPath(key)
	info := &driver.LockInfo{Key: key, Limit: 1}
	children, err := call(ctx, nil, d.timeout(), func() ([]string, error) {
		children, _, err := d.conn.Children(path)
		return children, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return info, nil
	}
	if err != nil {
		return nil, d.wrapErr("list the queue", err)
	}
	for _, n := range queue(children) {
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
			return nil, d.wrapErr("read "+n.name, err)
		}
		e := driver.Entry{Metadata: r.data, Since: time.UnixMilli(r.stat.Ctime), TTL: -1}
		if len(info.Holders) == 0 {
			e.Token = uint64(r.stat.Czxid)
			info.Holders = append(info.Holders, e)
			continue
		}
		info.Waiters = append(info.Waiters, e)
	}
	return info, nil
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

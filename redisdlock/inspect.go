package redisdlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// Inspect implements driver.Inspector with one atomic script (inspect.lua).
func (d *redisDriver) Inspect(ctx context.Context, key string) (*driver.LockInfo, error) {
	v, err := inspectScript.run(ctx, d.rdb, d.lockKeys(key)).Slice()
	if err != nil {
		return nil, wrapErr(fmt.Sprintf("redis at %s", d.addr), err)
	}
	if len(v) < 5 || (len(v)-5)%3 != 0 {
		return nil, fmt.Errorf("redis at %s: unexpected inspect reply of %d items", d.addr, len(v))
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	num := func(i int) int64 { n, _ := strconv.ParseInt(str(i), 10, 64); return n }
	now := num(0)
	info := &driver.LockInfo{Key: key, Limit: 1}
	if tok := str(1); tok != "" {
		token, _ := strconv.ParseUint(tok, 10, 64)
		pttl, _ := v[4].(int64)
		info.Holders = append(info.Holders, driver.Entry{
			Token:    token,
			Metadata: []byte(str(2)),
			Since:    time.UnixMilli(num(3)),
			TTL:      time.Duration(pttl) * time.Millisecond,
		})
	}
	for i := 5; i < len(v); i += 3 {
		info.Waiters = append(info.Waiters, driver.Entry{
			Metadata: []byte(str(i)),
			Since:    time.UnixMilli(num(i + 1)),
			TTL:      time.Duration(num(i+2)-now) * time.Millisecond,
		})
	}
	return info, nil
}

// List implements driver.Inspector. It scans for lock and queue keys under
// the prefix (on every master of a cluster) and inspects each key found.
func (d *redisDriver) List(ctx context.Context, prefix string) ([]*driver.LockInfo, error) {
	pattern := globEscape(d.prefix+"{"+escapeKey(prefix)) + "*"
	var mu sync.Mutex // ForEachMaster scans masters concurrently
	seen := map[string]bool{}
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if k, ok := d.userKey(iter.Val()); ok && strings.HasPrefix(k, prefix) {
				mu.Lock()
				seen[k] = true
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := d.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return scan(ctx, c)
		})
	} else {
		err = scan(ctx, d.rdb)
	}
	if err != nil {
		return nil, wrapErr(fmt.Sprintf("redis at %s", d.addr), err)
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []*driver.LockInfo
	for _, k := range keys {
		info, err := d.Inspect(ctx, k)
		if err != nil {
			return nil, err
		}
		if len(info.Holders) > 0 || len(info.Waiters) > 0 {
			out = append(out, info)
		}
	}
	return out, nil
}

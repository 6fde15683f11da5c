package redisdlock

import (
	"cmp"
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
	v, err := inspectScript.run(ctx, d, d.lockKeys(key)).Slice()
	if err != nil {
		return nil, wrapErr(fmt.Sprintf("redis at %s", d.addr), err)
	}
	info, err := parseInspect(key, v, d.addr)
	if err == nil {
		d.sawHolders(key, info) // the watches' deadline wake (watch.go)
	}
	return info, err
}

// parseInspect reads inspect.lua's reply: {now_ms, label, n, n holders of
// holderItems items, waiters of 4 items}.
func parseInspect(key string, v []any, addr string) (*driver.LockInfo, error) {
	bad := fmt.Errorf("redis at %s: unexpected inspect reply of %d items", addr, len(v))
	if len(v) < 3 {
		return nil, bad
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	num := func(i int) int64 { n, _ := strconv.ParseInt(str(i), 10, 64); return n }
	nh, _ := v[2].(int64)
	if nh < 0 || int64(len(v)) < 3+holderItems*nh || (int64(len(v))-3-holderItems*nh)%4 != 0 {
		return nil, bad
	}
	kind, limit, err := driver.ParseKindLabel(str(1))
	if err != nil {
		return nil, fmt.Errorf("redis at %s: key %q: %w", addr, key, err)
	}
	now := num(0)
	mode := func(i int) driver.Mode {
		if str(i) == "s" {
			return driver.Shared
		}
		return driver.Exclusive
	}
	info := &driver.LockInfo{Key: key, Kind: kind, Limit: limit}
	info.Holders, info.DelayedUntil = parseHolders(v[3:3+holderItems*nh], now)
	i := 3 + holderItems*int(nh)
	// Grant order: tokens increase with every grant.
	slices.SortFunc(info.Holders, func(a, b driver.Entry) int { return cmp.Compare(a.Token, b.Token) })
	for ; i < len(v); i += 4 {
		info.Waiters = append(info.Waiters, driver.Entry{
			Mode:     mode(i),
			Metadata: []byte(str(i + 1)),
			Since:    time.UnixMilli(num(i + 2)),
			TTL:      time.Duration(num(i+3)-now) * time.Millisecond,
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
	// As script.run: nothing for a server that cannot be dialled.
	if err := d.notify.unreachable(); err != nil {
		return nil, wrapErr(fmt.Sprintf("redis at %s", d.addr), err)
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

// holderItems is the number of items of a holder in the replies of
// inspect.lua and revoke.lua: token, mode, meta, since, deadline, delay,
// ended.
const holderItems = 7

// parseHolders reads holders of holderItems items each, on a server whose
// clock read nowMs, and returns them with the latest end of a lock-delay
// in force among them, by the local clock (zero when none is).
func parseHolders(v []any, nowMs int64) (holders []driver.Entry, delayedUntil time.Time) {
	str := func(i int) string { s, _ := v[i].(string); return s }
	num := func(i int) int64 { n, _ := strconv.ParseInt(str(i), 10, 64); return n }
	local := time.Now()
	for i := 0; i+holderItems <= len(v); i += holderItems {
		token, _ := strconv.ParseUint(str(i), 10, 64)
		mode := driver.Exclusive
		if str(i+1) == "s" {
			mode = driver.Shared
		}
		left := time.Duration(num(i+4)-nowMs) * time.Millisecond
		holders = append(holders, driver.Entry{
			Token:     token,
			Mode:      mode,
			Metadata:  []byte(str(i + 2)),
			Since:     time.UnixMilli(num(i + 3)),
			TTL:       left,
			LockDelay: time.Duration(num(i+5)) * time.Millisecond,
		})
		if str(i+6) == "1" {
			if until := local.Add(left); until.After(delayedUntil) {
				delayedUntil = until
			}
		}
	}
	return holders, delayedUntil
}

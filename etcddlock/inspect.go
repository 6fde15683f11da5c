package etcddlock

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/dlockdev/dlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Inspect returns the holders and the waiters of key, in order. Since is
// zero: etcd records no time with a key. TTL is reported for the holders
// only (one request per lease: not for every waiter), rounded up to whole
// seconds as etcd reports them.
func (d *etcdDriver) Inspect(ctx context.Context, key string) (*driver.LockInfo, error) {
	var resp *clientv3.GetResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Range over the lock's queue with the metadata, oldest first
		// (release markers included: dropped below).
		resp, err = d.kv.Get(ctx, d.queueDir(key), clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		return err
	})
	if err != nil {
		return nil, d.wrapErr("read the queue", err)
	}
	dir := d.queueDir(key)
	delays, until := d.inspectDelays(dir, resp.Kvs)
	ended := endedRecords(dir, resp.Kvs) // still holders, until their delays end
	entries := slices.DeleteFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool {
		return !isEntry(dir, string(kv.Key)) && ended[string(kv.Key)] == nil
	})
	info, err := d.describe(ctx, key, entries)
	if err != nil {
		return nil, err
	}
	withDelays(info, entries, delays, until)
	return info, nil
}

// List returns the locks whose key starts with prefix, sorted by key.
func (d *etcdDriver) List(ctx context.Context, prefix string) ([]*driver.LockInfo, error) {
	var resp *clientv3.GetResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Range over every queue whose key starts with prefix (escaping
		// keeps prefixes), oldest entry first.
		resp, err = d.kv.Get(ctx, d.prefix+escapeKey(prefix), clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		return err
	})
	if err != nil {
		return nil, d.wrapErr("list the queues", err)
	}
	queues := map[string][]*mvccpb.KeyValue{}
	records := map[string][]*mvccpb.KeyValue{} // lock-delay records (lockdelay.go)
	for _, kv := range resp.Kvs {
		if i := strings.LastIndex(string(kv.Key), delaySuffix); i >= 0 {
			if key, _, ok := d.splitEntry(string(kv.Key[:i])); ok && strings.HasPrefix(key, prefix) {
				records[key] = append(records[key], kv)
			}
			continue
		}
		// Release markers and tails do not split: their names contain
		// a '/', or none.
		key, _, ok := d.splitEntry(string(kv.Key))
		if ok && strings.HasPrefix(key, prefix) {
			queues[key] = append(queues[key], kv)
		}
	}
	var out []*driver.LockInfo
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range queues {
			if !yield(k) {
				return
			}
		}
	}) {
		dir := d.queueDir(key)
		all := append(records[key], queues[key]...)
		delays, until := d.inspectDelays(dir, all)
		ended := endedRecords(dir, all) // still holders, until their delays end
		entries := slices.DeleteFunc(all, func(kv *mvccpb.KeyValue) bool {
			return !isEntry(dir, string(kv.Key)) && ended[string(kv.Key)] == nil
		})
		slices.SortStableFunc(entries, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
		info, err := d.describe(ctx, key, entries)
		if err != nil {
			return nil, err
		}
		withDelays(info, entries, delays, until)
		out = append(out, info)
	}
	return out, nil
}

// describe builds a LockInfo from a queue's entries, oldest first. The
// kind is the one the entries carry (all carry one: see the kind check in
// join.go); the holders are the entries the grant rule grants, a prefix
// of the queue (grants happen in queue order), each with its TTL left.
func (d *etcdDriver) describe(ctx context.Context, key string, kvs []*mvccpb.KeyValue) (*driver.LockInfo, error) {
	info := &driver.LockInfo{Key: key, Limit: 1}
	shared, exclusive := 0, 0
	granting := true
	dir := d.queueDir(key)
	for i, kv := range kvs {
		label, m, md := parseEntry(kv.Value)
		_, rm, delay, ended := parseDelay(dir, string(kv.Key))
		if ended {
			// An ended entry's delay record (lockdelay.go): a holder of
			// its mode until its delay is over.
			label, md = parseDelayValue(kv.Value)
			m = rm
		}
		if i == 0 {
			if k, limit, err := driver.ParseKindLabel(label); err == nil {
				info.Kind, info.Limit = k, limit
			}
		}
		e := driver.Entry{Metadata: md, TTL: -1, Mode: m}
		granting = granting && driver.Admits(info.Limit, m, shared, exclusive)
		if m == driver.Shared {
			shared++
		} else {
			exclusive++
		}
		if !granting {
			info.Waiters = append(info.Waiters, e)
			continue
		}
		e.Token = uint64(kv.CreateRevision)
		if ended {
			e.LockDelay = delay
			info.Holders = append(info.Holders, e)
			continue
		}
		ttl, err := d.ttlLeft(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return nil, d.wrapErr("read the holder's lease", err)
		}
		e.TTL = ttl
		info.Holders = append(info.Holders, e)
	}
	return info, nil
}

// ttlLeft returns how long etcd keeps a lease without renewal, or -1 if
// unknown. etcd reports whole seconds, rounded down: the result is rounded
// up instead (never above the granted TTL), so that a live lease never
// shows zero.
func (d *etcdDriver) ttlLeft(ctx context.Context, id clientv3.LeaseID) (time.Duration, error) {
	if id == clientv3.NoLease {
		return -1, nil
	}
	// LeaseTimeToLive.
	resp, err := d.lc.TimeToLive(ctx, id)
	switch {
	case isLeaseNotFound(err):
		return -1, nil
	case err != nil:
		return 0, err
	case resp.TTL < 0:
		return -1, nil // expired: etcd is about to delete the entry
	}
	return min(time.Duration(resp.TTL+1), time.Duration(resp.GrantedTTL)) * time.Second, nil
}

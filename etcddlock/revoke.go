package etcddlock

import (
	"context"
	"fmt"
	"slices"

	"github.com/dlockdev/dlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// revokeRounds bounds the rounds of a Revoke whose Txn found the queue
// changed since its read: each round follows another client's write.
const revokeRounds = 16

// Revoke deletes the entries of key's holders (driver.Revoker): every
// holder when token is 0, else the one whose create revision is token. It
// deletes entries only, never a lease: a Client's entries share its etcd
// lease (docs/etcd.md, One lease per Client and TTL), and revoking the
// lease would end the holder's other locks and places in queues too.
//
// Waiters wake as on a release by a holder that does not write a release
// marker (a Shared holder's): the waiter that watched a revoked entry sees
// its delete alone, reads the queue and is granted by the read. Their
// tokens are their create revisions, above every holder's (entries are
// created behind every existing one), so the next grant's token is above
// the revoked one. The revoked holder's watch of its entry, started at its
// first renewal, sees the delete and ends its lease; its Release finds the
// entry gone and returns ErrNotHeld.
func (d *etcdDriver) Revoke(ctx context.Context, key string, token uint64) ([]driver.Entry, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.inflight.Done()
	dir := d.queueDir(key)
	tail := tailKey(dir)
	for range revokeRounds {
		var resp *clientv3.GetResponse
		err := retry(ctx, func(ctx context.Context) (err error) {
			// Range over the lock's queue with the values, oldest first.
			resp, err = d.kv.Get(ctx, dir, clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
			return err
		})
		if err != nil {
			return nil, d.wrapErr("read the queue", err)
		}
		delays, until := d.inspectDelays(dir, resp.Kvs)
		records := map[string]*mvccpb.KeyValue{} // delay records by entry
		for _, kv := range resp.Kvs {
			if entry, _, _, ok := parseDelay(dir, string(kv.Key)); ok {
				records[entry] = kv
			}
		}
		kvs := slices.DeleteFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool { return !isEntry(dir, string(kv.Key)) })
		info, err := d.describe(ctx, key, kvs)
		if err != nil {
			return nil, err
		}
		withDelays(info, kvs, delays, until)
		// The holders are the oldest entries, in order (describe).
		var cmps []*pb.Compare
		var then []*pb.RequestOp
		var revoked []driver.Entry
		var delayed []*mvccpb.KeyValue // the revoked entries' delay records
		var newest int64
		for i, h := range info.Holders {
			if token != 0 && h.Token != token {
				continue
			}
			kv := kvs[i]
			// Each revoked entry as read: a holder that released, or a
			// name reused since, is not ours to delete.
			cmps = append(cmps, cmpMod(string(kv.Key), pb.Compare_EQUAL, kv.ModRevision))
			then = append(then, opDelete(string(kv.Key)))
			revoked, newest = append(revoked, h), kv.CreateRevision
			if r := records[string(kv.Key)]; r != nil && r.CreateRevision == kv.CreateRevision {
				delayed = append(delayed, r)
			}
		}
		switch {
		case len(revoked) == 0 && token != 0:
			return nil, fmt.Errorf("%w: no holder has fencing token %d", driver.ErrNotHeld, token)
		case len(revoked) == 0:
			return nil, nil
		}
		// Txn: if every revoked entry is as read, delete them; and if the
		// tail names one of them (it names the newest entry, created at
		// the tail's mod revision), delete it too, as that entry's release
		// would. No release marker: it would grant the waiter behind with
		// no read, and only an Exclusive holder's own release proves that.
		then = append(then, opTxn([]*pb.Compare{cmpMod(tail, pb.Compare_GREATER, newest)}, nil, []*pb.RequestOp{opDelete(tail)}))
		// And put their delay records, as read, on a lease of their
		// delay (lockdelay.go): they go by themselves once it is over.
		dcmps, dputs, err := d.revokeDelays(ctx, delayed, dir)
		if err != nil {
			return nil, err
		}
		cmps, then = append(cmps, dcmps...), append(then, dputs...)
		r, err := d.txn(ctx, cmps, then, nil)
		switch {
		case err != nil && rejected(err):
			continue // etcd refused it unapplied: read again
		case err != nil:
			// Applied or not, we cannot tell: a retry by the caller
			// finds the entries gone (ErrNotHeld for a token) or
			// revokes whoever holds then (token 0).
			return nil, d.wrapErr("delete the holders' entries", err)
		case r.Succeeded:
			return revoked, nil
		}
	}
	return nil, fmt.Errorf("%w: etcd at %s: the queue of %q changed at each of %d tries", driver.ErrUnavailable, d.addr, key, revokeRounds)
}

var _ driver.Revoker = (*etcdDriver)(nil)

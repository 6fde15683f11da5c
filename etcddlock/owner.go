package etcddlock

import (
	"context"
	"fmt"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/leasegrant"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// IsOwner returns a comparison that holds while lease still holds its key
// on etcd: put it in the If of your own Txn, on the etcd cluster that the
// lease's Client uses and through a KV without a namespace (dlock's keys are
// outside any namespace: see New), and the Txn's Then runs only while the
// lease holds, atomically with the check. Through a namespaced KV the
// comparison names a key that does not exist, and the Txn never runs.
//
//	cmp, err := etcddlock.IsOwner(lease)
//	…
//	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut("orders/42", "closed")).Commit()
//	…
//	if !resp.Succeeded {
//		return &dlock.StaleTokenError{Fence: lease.Key(), Token: lease.Token()}
//	}
//
// resp.Succeeded false means that the lease no longer held its key when etcd
// applied the Txn: it was released (Unlock, Client.Close), its etcd lease
// expired or was revoked (the holder was paused or cut off past its TTL), or
// its entry was deleted by hand; Then did not run. OwnerTxn runs ops this
// way and returns that error itself. Put other conditions of your own in a
// nested clientv3.OpTxn inside Then, so that Succeeded keeps this one
// meaning.
//
// The comparison is that the lease's queue entry exists with the create
// revision it had when granted (its fencing token). Mere existence would not
// do: the driver reuses etcd leases for later calls, and a later call's entry
// has the same name (keys.go), but a create revision of its own. While the
// entry exists, it stays granted: entries are created behind every existing
// one, so those ahead of it only go, and the grant rule never takes back a
// grant (queue.go). So the Txn commits at a revision where the lease held;
// the next holder of a lock or a writer is granted only after the entry's
// delete, at a later revision, so every write made under IsOwner is ordered
// before that holder's first one. For a semaphore's permit or a read lease
// it means "this permit, or this read lease, is still held": other permits
// and readers hold at the same time.
//
// IsOwner does not look at the lease's local state (Done, Err): etcd's answer
// is the one that counts. A lease whose renewals failed may still hold its
// entry on etcd, and then the write is as safe as any; one released or lost
// never does, as a deleted entry never comes back with its create revision.
// The comparison stays false for good once it is false.
//
// It returns an error wrapping dlock.ErrInvalidFence for a nil lease or one that
// is not etcddlock's (a lease of Redis, ZooKeeper or a wrapped driver).
func IsOwner(lease *dlock.Lease) (clientv3.Cmp, error) {
	g, err := etcdGrant("etcddlock.IsOwner", lease)
	if err != nil {
		return clientv3.Cmp{}, err
	}
	return ownerCmp(g), nil
}

// ownerCmp compares the create revision of the grant's entry with its
// token. etcd compares the create revision of a missing key as 0, and a
// token is never 0, so a deleted entry fails it too.
func ownerCmp(g *grant) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(g.key), "=", g.token)
}

// etcdGrant returns the etcd grant behind lease, or an error for the call
// named by where.
func etcdGrant(where string, lease *dlock.Lease) (*grant, error) {
	if lease == nil {
		return nil, fmt.Errorf("%s: %w: nil lease", where, dlock.ErrInvalidFence)
	}
	g, ok := leasegrant.Of(lease).(*grant)
	if !ok || g == nil {
		return nil, fmt.Errorf("%s: lease of key %q: %w: not an etcd lease (%T)", where, lease.Key(), dlock.ErrInvalidFence, leasegrant.Of(lease))
	}
	return g, nil
}

// OwnerTxn runs ops in one Txn on kv if lease still holds its key (see
// IsOwner), and returns etcd's response. If it no longer did, nothing ran,
// and the error is a *dlock.StaleTokenError (errors.Is(err,
// dlock.ErrStaleToken)) with the lease's key as Fence and its token as
// Token; Recorded is 0, as the check compares no tokens. It returns an error
// wrapping dlock.ErrInvalidFence, without a request, as IsOwner does, and etcd's
// error, wrapped, if the Txn failed: then, as with any etcd write whose reply
// was lost, ops may have run.
//
// kv must see the key space the lease's Client writes in: the same etcd
// cluster, without a namespace (see IsOwner).
func OwnerTxn(ctx context.Context, kv clientv3.KV, lease *dlock.Lease, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	g, err := etcdGrant("etcddlock.OwnerTxn", lease)
	if err != nil {
		return nil, err
	}
	// Txn: if our entry is still the one granted to us, run ops.
	resp, err := kv.Txn(ctx).If(ownerCmp(g)).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcddlock.OwnerTxn: lease of key %q: %w", lease.Key(), err)
	}
	if !resp.Succeeded {
		return resp, &dlock.StaleTokenError{Fence: lease.Key(), Token: lease.Token()}
	}
	return resp, nil
}

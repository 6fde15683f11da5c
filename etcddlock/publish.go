package etcddlock

import (
	"context"
	"fmt"

	"github.com/dlockdev/dlock/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Publish replaces the metadata stored in our entry (an election's
// Proclaim): see driver.Publisher.
//
// The entry is rewritten with its header (keys.go) and the new metadata, on
// the same lease, in a Txn that requires the entry to be the one we created:
// its create revision is our token, and etcd gives a re-created key a new
// one, so a Publish never writes to an entry that is not this grant's (a
// later call on the same lease, after our entry expired or was deleted,
// creates a new entry with a higher create revision). So it is idempotent:
// a retry after a lost reply writes the same value again while we hold the
// key, and fails with ErrNotHeld once we do not.
//
// What the rewrite changes is the entry's value and mod revision, nothing
// else: the lease, and so the validity, are untouched (a Put does not renew
// a lease). Who looks at an entry's mod revision or at its puts:
//   - No waiter: one that watches the entry ahead takes only a put that
//     re-creates its name for a change (check, change); a semaphore's
//     waiter watches deletes alone.
//   - A waiter's release marker: a separate key (markerKey), put only by
//     a release; a Publish never writes one, so a waiter never takes a
//     Publish for the release of the entry ahead.
//   - The grant's own watch for the deletion of its entry filters puts.
//   - TryLock's emptiness check compares values with "": an entry's value
//     is never empty (entryValue), before or after a Publish.
//
// Observers (Watch) see the put and read the new value.
func (g *grant) Publish(ctx context.Context, metadata []byte) error {
	value := entryValue(g.label, g.mode, metadata)
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Txn: if our entry is the one we created, put it again with the
		// new metadata, on our lease.
		resp, err = g.d.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(g.key), "=", g.token)).
			Then(clientv3.OpPut(g.key, value, clientv3.WithLease(g.l.id))).
			Commit()
		return err
	})
	if err != nil {
		if isLeaseNotFound(err) {
			// The lease expired between the compare's read and the put
			// (etcd checks the lease of a Put in the same apply): our
			// entry went with it.
			return fmt.Errorf("%w: its etcd lease has expired", driver.ErrNotHeld)
		}
		return g.d.wrapErr("publish the value", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: its etcd key is gone (lease expired, released or deleted)", driver.ErrNotHeld)
	}
	return nil
}

var _ driver.Publisher = (*grant)(nil)

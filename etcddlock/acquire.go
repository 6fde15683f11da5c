package etcddlock

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/dlockdev/dlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errRequeue means that the call lost its place in the queue: its lease
// expired while it could not renew it, or somebody deleted its entry. It
// queues again, at the end.
var errRequeue = errors.New("etcddlock: place in the queue lost")

// errWatch means that a watch ended by itself (no leader, stream broken):
// look at the queue again after a pause.
var errWatch = errors.New("etcddlock: watch ended")

// Acquire takes req.Key: see driver.Driver.
func (d *etcdDriver) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.inflight.Done()
	// Close interrupts a waiting call.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.ctx, cancel)
	defer stop()

	dir := d.queueDir(req.Key)
	a := &attempt{d: d, req: req, dir: dir, secs: seconds(req.TTL)}
	g, err := a.run(ctx)
	if err != nil {
		a.abandon(ctx)
		return nil, err
	}
	return g, nil
}

// attempt is one Acquire call.
type attempt struct {
	d    *etcdDriver
	req  *driver.AcquireRequest
	dir  string // the lock's queue directory
	secs int64  // TTL in whole seconds

	l     *etcdLease // nil until taken, and after it was given up
	key   string     // our entry: dir + the lease's id
	rev   int64      // create revision of our entry once created: the fencing token
	dirty bool       // a request that may have created our entry failed: its outcome is unknown

	// What we wait for: the newest entry older than ours.
	pred     string // its etcd key; "" when ours is the oldest
	predRev  int64  // its create revision
	seen     int64  // a revision at which pred and our entry both existed
	lastPred string // the last entry we waited for: its release marker is ours to delete
	lostJoin bool   // our join's reply was lost: we may not know what we waited for
}

func (a *attempt) run(ctx context.Context) (*grant, error) {
	var b backoff
	for {
		if a.l == nil {
			l, err := a.d.takeLease(ctx, a.secs)
			if err != nil {
				return nil, err
			}
			a.l, a.key = l, entryKey(a.dir, l.id)
		}
		var err error
		if a.req.Wait {
			if err = a.join(ctx); err == nil {
				err = a.wait(ctx)
			}
		} else {
			err = a.try(ctx)
		}
		if err == nil {
			err = a.freshen(ctx)
		}
		if err == nil {
			return a.grant(ctx), nil
		}
		if !errors.Is(err, errRequeue) {
			return nil, err
		}
		a.rev, a.pred, a.lastPred, a.lostJoin = 0, "", "", false
		if err := b.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// try makes the one attempt of TryLock.
func (a *attempt) try(ctx context.Context) error {
	tail := tailKey(a.dir)
	take := append([]clientv3.Op{
		clientv3.OpPut(a.key, entryValue(a.req.Metadata), clientv3.WithLease(a.l.id)),
		clientv3.OpPut(tail, a.key, clientv3.WithLease(a.l.id)),
	}, a.l.dropMarker()...)
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Txn: if our entry does not exist, create it (and make the tail
		// name it) only if the queue is empty: no holder and no waiter,
		// as TryLock never barges ahead of waiters. Empty means no key in
		// the directory, or only release markers (empty values; etcd
		// fails a value comparison over no keys, hence two steps). If our
		// entry exists, read it: an earlier try of this call created it
		// and its reply was lost (its name is our lease's id, and the
		// lease is ours alone).
		resp, err = a.d.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0)).
			Then(clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(a.dir), "=", 0).WithPrefix()},
				take,
				[]clientv3.Op{clientv3.OpTxn(
					[]clientv3.Cmp{clientv3.Compare(clientv3.Value(a.dir), "=", "").WithPrefix()},
					take, nil)})).
			Else(clientv3.OpGet(a.key)).
			Commit()
		if err != nil && !rejected(err) {
			// Unknown outcome: the Put may yet be applied.
			a.dirty = true
		}
		return err
	})
	if err != nil {
		return a.txnErr("take the lock", err)
	}
	if !resp.Succeeded {
		// Created by this call into an empty queue: the oldest entry.
		a.rev, a.seen = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision, resp.Header.Revision
		return nil
	}
	if in := resp.Responses[0].GetResponseTxn(); in.Succeeded || in.Responses[0].GetResponseTxn().Succeeded {
		a.rev, a.seen = resp.Header.Revision, resp.Header.Revision
		a.l.marker = ""
		return nil
	}
	return driver.ErrLocked // held, or waited for: a fair lock never lets TryLock barge
}

// queueReadLimit is how many keys a read of the queue returns at first: our
// entry, the one ahead of it, and room for release markers, which live from
// a release to the next holder's release.
const queueReadLimit = 8

// newestFirst are the options of a read of a queue's newest keys, keys only.
func newestFirst(limit int64) []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(limit)}
}

// join puts our entry at the end of the queue and finds the entry to wait for.
func (a *attempt) join(ctx context.Context) error {
	tail := tailKey(a.dir)
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Txn: unless our entry exists, find the entry to wait for, then
		// create ours and make the tail name it. A retry after a lost
		// reply finds our entry instead of queueing twice: its name is
		// our lease's id, and the lease is ours alone.
		//
		// The entry to wait for is the newest one, which the tail names
		// (read before our writes): one key. A sorted read of the queue
		// would cost etcd's apply loop a walk of every entry at every
		// join — quadratic in a burst of waiters, and etcd refuses writes
		// ("too many requests") while its apply lags. Without a tail (the
		// newest entry left with nobody behind it: a free key, or the
		// last waiter gave up), read the newest keys of the queue instead,
		// keys only: the queue is then usually empty.
		then := append([]clientv3.Op{
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(tail), ">", 0)},
				[]clientv3.Op{clientv3.OpGet(tail)},
				[]clientv3.Op{clientv3.OpGet(a.dir, newestFirst(queueReadLimit)...)}),
			clientv3.OpPut(a.key, entryValue(a.req.Metadata), clientv3.WithLease(a.l.id)),
			clientv3.OpPut(tail, a.key, clientv3.WithLease(a.l.id)),
		}, a.l.dropMarker()...)
		resp, err = a.d.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0)).
			Then(then...).
			Else(clientv3.OpGet(a.key)).
			Commit()
		if err != nil && !rejected(err) {
			// Unknown outcome: the Put may yet be applied.
			a.dirty = true
		}
		return err
	})
	if err != nil {
		return a.txnErr("queue", err)
	}
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			// Created by an earlier try whose reply was lost.
			a.rev = kvs[0].CreateRevision
		}
		a.lostJoin = true
		return a.findPred(ctx, resp.Header.Revision)
	}
	a.rev, a.seen = resp.Header.Revision, resp.Header.Revision
	a.l.marker = ""
	ahead := resp.Responses[0].GetResponseTxn()
	r := ahead.Responses[0].GetResponseRange()
	if !ahead.Succeeded {
		if a.pickPred(r.Kvs) || !r.More {
			return nil
		}
		return a.findPred(ctx, a.rev) // only markers among the newest keys
	}
	// The tail was written with the newest entry, in the same write and on
	// the same lease, and is deleted when that entry goes (by its release,
	// or with its lease): it names an entry that exists, and its mod
	// revision is that entry's create revision. Only a hand-made change
	// breaks this; the wait checks the entry at its first renewal (checkQueue).
	if len(r.Kvs) != 1 || !isEntry(a.dir, string(r.Kvs[0].Value)) || string(r.Kvs[0].Value) == a.key {
		// Not an entry's key, or ours: a tail left by an entry deleted
		// by hand (ours, before we queued again with the same lease).
		return a.findPred(ctx, a.rev)
	}
	a.pred, a.predRev = string(r.Kvs[0].Value), r.Kvs[0].ModRevision
	return nil
}

// txnErr handles an error from the Txn that creates our entry.
func (a *attempt) txnErr(what string, err error) error {
	if isLeaseNotFound(err) {
		// The lease expired between taking and using it: take another.
		a.l, a.dirty = nil, false
		return errRequeue
	}
	return a.d.wrapErr(what, err)
}

// pickPred records the entry to wait for: the first entry of kvs, a read
// of the queue newest first that does not include ours, skipping release
// markers. It reports whether there was one.
func (a *attempt) pickPred(kvs []*mvccpb.KeyValue) bool {
	a.pred, a.predRev = "", 0
	for _, kv := range kvs {
		if isEntry(a.dir, string(kv.Key)) {
			a.pred, a.predRev = string(kv.Key), kv.CreateRevision
			return true
		}
	}
	return false
}

// findPred reads the queue again, at a revision not older than minRev.
func (a *attempt) findPred(ctx context.Context, minRev int64) error {
	if a.rev == 0 {
		return errRequeue
	}
	for limit := int64(queueReadLimit); ; limit *= 8 {
		var resp *clientv3.GetResponse
		err := retry(ctx, func(ctx context.Context) (err error) {
			// Range over the queue, keys only: our entry and the newest
			// one older than ours. Serializable (no leader round) when
			// the member has applied minRev, after which entries older
			// than ours can only have gone; else linearizable.
			opts := append(newestFirst(limit), clientv3.WithMaxCreateRev(a.rev))
			resp, err = a.d.kv.Get(ctx, a.dir, append(opts, clientv3.WithSerializable())...)
			if err == nil && resp.Header.Revision < minRev {
				resp, err = a.d.kv.Get(ctx, a.dir, opts...)
			}
			return err
		})
		if err != nil {
			return a.d.wrapErr("read the queue", err)
		}
		kvs := resp.Kvs
		if len(kvs) == 0 || string(kvs[0].Key) != a.key || kvs[0].CreateRevision != a.rev {
			return errRequeue // our entry is gone
		}
		a.seen = resp.Header.Revision
		if a.pickPred(kvs[1:]) || !resp.More {
			return nil
		}
		// Only release markers among the newest keys: read further.
	}
}

// freshen renews the lease of a call that has just been granted the key if
// its last renewal is old (a slow request, a server restart): the grant's
// validity counts from that renewal, and would be about to lapse. A renewal
// that succeeds proves that etcd never dropped the lease, nor our entry with
// it.
func (a *attempt) freshen(ctx context.Context) error {
	if time.Since(a.l.since()) < a.l.ttl/2 {
		return nil
	}
	err := retry(ctx, func(ctx context.Context) error { return a.l.keepAlive(ctx, a.d.lc) })
	if errors.Is(err, driver.ErrNotHeld) {
		a.l, a.dirty = nil, false
		return errRequeue
	}
	if err != nil {
		return a.d.wrapErr("renew the lease", err)
	}
	return nil
}

// grant hands the lease to a new grant.
func (a *attempt) grant(ctx context.Context) *grant {
	g := &grant{
		d:         a.d,
		l:         a.l,
		dir:       a.dir,
		key:       a.key,
		token:     a.rev,
		seen:      a.seen,
		validFrom: a.l.since(),
		reusable:  !a.dirty,
		lost:      make(chan error, 1),
	}
	switch {
	case a.lastPred != "":
		g.markers = []string{markerKey(a.lastPred)}
	case a.lostJoin && a.req.Wait:
		g.markers = a.strayMarkers(ctx)
	}
	a.l = nil
	return g
}

// strayMarkers returns the release markers in our queue, for a call whose
// join reply was lost and that holds the key without having waited for
// anybody: the entry ahead of it when it joined may have been released for
// it before the retry that found its entry, and that release's marker is
// ours to delete (it would stay until the releaser's lease is used again
// or ends). Now that our entry is the oldest, every marker of the queue has
// served or was left by a waiter that gave up or died: nobody waits for an
// entry older than ours. Best effort: it reads a few and gives up on error.
func (a *attempt) strayMarkers(ctx context.Context) []string {
	var resp *clientv3.GetResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Range over the queue, keys only, sorted by value: markers (the
		// empty values) first.
		resp, err = a.d.kv.Get(ctx, a.dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByValue, clientv3.SortAscend), clientv3.WithLimit(queueReadLimit))
		return err
	})
	if err != nil {
		return nil
	}
	var markers []string
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); !isEntry(a.dir, k) && k != markerKey(a.key) {
			markers = append(markers, k)
		}
	}
	return markers
}

// abandon removes every trace of a failed or cancelled call from etcd.
func (a *attempt) abandon(ctx context.Context) {
	// One bound for all of it, even if ctx has ended: see revoke.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	switch {
	case a.l == nil:
	case a.rev == 0 && !a.dirty:
		// Nothing is attached to the lease: keep it for the next call.
		a.d.recycle(ctx, a.l)
	default:
		// Revoking the lease deletes our entry, whether we were waiting
		// or had just been granted the key.
		a.d.revoke(ctx, a.l)
	}
	a.l = nil
	if p := cmp.Or(a.pred, a.lastPred); p != "" {
		// The entry ahead may have been released for us just now: its
		// marker is ours to delete. Left alone, it would stay until the
		// releaser's lease is used again or ends.
		a.d.deleteMarker(ctx, markerKey(p))
	}
}

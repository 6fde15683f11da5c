package etcddlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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
	pred    string // its etcd key; "" when ours is the oldest
	predRev int64  // its create revision
	seen    int64  // a revision at which pred and our entry both existed
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
			return a.grant(), nil
		}
		if !errors.Is(err, errRequeue) {
			return nil, err
		}
		a.rev, a.pred = 0, ""
		if err := b.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// try makes the one attempt of TryLock.
func (a *attempt) try(ctx context.Context) error {
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Txn: create our entry only if the queue is empty (no holder and
		// no waiter: TryLock never barges ahead of waiters); else read
		// our entry, which exists only if an earlier try of this call
		// created it and its reply was lost: its name is our lease's id,
		// and the lease is ours alone.
		resp, err = a.d.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.dir), "=", 0).WithPrefix()).
			Then(clientv3.OpPut(a.key, string(a.req.Metadata), clientv3.WithLease(a.l.id))).
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
	if resp.Succeeded {
		a.rev, a.seen = resp.Header.Revision, resp.Header.Revision
		return nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		// Created by this call into an empty queue: the oldest entry.
		a.rev, a.seen = kvs[0].CreateRevision, resp.Header.Revision
		return nil
	}
	return fmt.Errorf("%w: held by another owner or waited for (etcd keys %s*)", driver.ErrLocked, a.dir)
}

// join puts our entry at the end of the queue and finds the entry to wait for.
func (a *attempt) join(ctx context.Context) error {
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Txn: create our entry unless it exists, and read the two
		// newest entries of the queue: ours and the one we wait for. A
		// retry after a lost reply finds our entry instead of queueing
		// twice: its name is our lease's id, and the lease is ours alone.
		// The read is keys only, which etcd serves from its in-memory
		// index.
		resp, err = a.d.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0)).
			Then(clientv3.OpPut(a.key, string(a.req.Metadata), clientv3.WithLease(a.l.id)),
				clientv3.OpGet(a.dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
					clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2))).
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
	if resp.Succeeded {
		a.rev = resp.Header.Revision
		return a.setPred(resp.Responses[1].GetResponseRange(), resp.Header.Revision)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		// Created by an earlier try whose reply was lost.
		a.rev = kvs[0].CreateRevision
	}
	return a.findPred(ctx, resp.Header.Revision)
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

// setPred records the entry to wait for from a read of the two newest
// entries not newer than ours, made at revision rev.
func (a *attempt) setPred(r *pb.RangeResponse, rev int64) error {
	if len(r.Kvs) == 0 || string(r.Kvs[0].Key) != a.key || r.Kvs[0].CreateRevision != a.rev {
		return errRequeue // our entry is gone
	}
	a.seen = rev
	a.pred, a.predRev = "", 0
	if len(r.Kvs) > 1 {
		a.pred, a.predRev = string(r.Kvs[1].Key), r.Kvs[1].CreateRevision
	}
	return nil
}

// findPred reads the queue again, at a revision not older than minRev.
func (a *attempt) findPred(ctx context.Context, minRev int64) error {
	if a.rev == 0 {
		return errRequeue
	}
	var resp *clientv3.GetResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Range over the queue, keys only: our entry and the newest one
		// older than ours. Serializable (no leader round) when the member
		// has applied minRev, after which entries older than ours can
		// only have gone; else linearizable.
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(a.rev),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2)}
		resp, err = a.d.kv.Get(ctx, a.dir, append(opts, clientv3.WithSerializable())...)
		if err == nil && resp.Header.Revision < minRev {
			resp, err = a.d.kv.Get(ctx, a.dir, opts...)
		}
		return err
	})
	if err != nil {
		return a.d.wrapErr("read the queue", err)
	}
	return a.setPred((*pb.RangeResponse)(resp), resp.Header.Revision)
}

// wait returns once our entry is the oldest in the queue.
func (a *attempt) wait(ctx context.Context) error {
	var b backoff
	for a.pred != "" {
		rev, err := a.waitGone(ctx)
		switch {
		case err == nil:
			// Read the queue even if the entry ahead was the oldest, so
			// that nothing older can be left: our own entry may have
			// been deleted meanwhile.
			b = backoff{}
			err = a.findPred(ctx, rev)
		case errors.Is(err, errWatch):
			if err = b.wait(ctx); err == nil {
				err = a.findPred(ctx, a.seen)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
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

// waitGone waits until the entry a.pred is deleted, keeping our lease alive
// meanwhile, and returns a revision at which it was gone.
func (a *attempt) waitGone(ctx context.Context) (int64, error) {
	wctx, cancel := context.WithCancel(watchCtx(ctx))
	defer cancel()
	// Watch create: deletes of the entry we wait for, starting now. Not
	// from a.seen+1: etcd serves a watch that starts in the past
	// ("unsynced") from a catch-up loop that runs every 100 ms, so a delete
	// would reach us up to 100 ms late. A watch that starts at the current
	// revision is synced: etcd hands it each event as the event is applied.
	wch := a.d.w.Watch(wctx, a.pred, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	created, ok := <-wch
	if !ok || created.Err() != nil || !created.Created {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if ok && isAuthErr(created.Err()) {
			return 0, a.d.wrapErr("watch", created.Err())
		}
		return 0, errWatch
	}
	if start := created.Header.Revision; start > a.seen {
		// The watch sees what happens after start only: the entry may
		// have gone in between.
		var resp *clientv3.GetResponse
		err := retry(ctx, func(ctx context.Context) (err error) {
			// Range, that one key: serializable if the member has
			// applied start, else linearizable.
			resp, err = a.d.kv.Get(ctx, a.pred, clientv3.WithKeysOnly(), clientv3.WithSerializable())
			if err == nil && resp.Header.Revision < start {
				resp, err = a.d.kv.Get(ctx, a.pred, clientv3.WithKeysOnly())
			}
			return err
		})
		if err != nil {
			return 0, a.d.wrapErr("read the queue", err)
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != a.predRev {
			return resp.Header.Revision, nil
		}
	}
	renew := time.NewTimer(a.renewIn())
	defer renew.Stop()
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				if ctx.Err() != nil {
					return 0, ctx.Err()
				}
				return 0, errWatch
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return ev.Kv.ModRevision, nil
				}
			}
		case <-renew.C:
			if err := a.renewWhileWaiting(ctx); err != nil {
				return 0, err
			}
			renew.Reset(a.renewIn())
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// renewIn is the time until the lease should be renewed: a third of its TTL
// after the last renewal, as the lease engine does for holders.
func (a *attempt) renewIn() time.Duration {
	return time.Until(a.l.since().Add(a.l.ttl / 3))
}

// renewWhileWaiting keeps a waiter's lease, and so its place, alive.
//
// A busy or leaderless etcd ("too many requests", "no leader", "timed out")
// may still keep the lease: the renewal is retried, with backoff, until the
// lease may have lapsed (or for a third of its TTL if that moment has passed
// already). If etcd has not answered by then, the waiter keeps its place
// and tries again at once: etcd never renews a lease it expired (it answers
// "not found" once the expiry is applied, and we queue again then), so a
// renewal that succeeds late proves that our lease, and our entry with it,
// were never dropped. Giving up the place on a slow answer instead would
// turn a busy etcd into a storm: every waiter queueing again at once, each
// with a new lease and a new join, while the old entries wait to expire.
// Nothing is granted on a lease of unknown state: the read when woken checks
// that our entry exists, and freshen renews an old lease before the grant.
func (a *attempt) renewWhileWaiting(ctx context.Context) error {
	until := a.l.safeUntil()
	if soon := time.Now().Add(a.l.ttl / 3); until.Before(soon) {
		until = soon
	}
	kctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	err := retry(kctx, func(kctx context.Context) error { return a.l.keepAlive(kctx, a.d.lc) })
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, driver.ErrNotHeld):
		// The lease is gone: so is our entry.
		a.l, a.dirty = nil, false
		return errRequeue
	case kctx.Err() != nil:
		return nil // overdue: renewIn is past, so the caller tries again at once
	}
	return a.d.wrapErr("renew the lease", err)
}

// grant hands the lease to a new grant.
func (a *attempt) grant() *grant {
	g := &grant{
		d:         a.d,
		l:         a.l,
		key:       a.key,
		token:     a.rev,
		seen:      a.seen,
		validFrom: a.l.since(),
		reusable:  !a.dirty,
		lost:      make(chan error, 1),
	}
	a.l = nil
	return g
}

// abandon removes every trace of a failed or cancelled call from etcd.
func (a *attempt) abandon(ctx context.Context) {
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
}

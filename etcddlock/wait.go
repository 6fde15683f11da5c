package etcddlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlockdev/dlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// wait waits for what the plan names to change (stepWait).
func (a *attempt) wait(ctx context.Context) error {
	a.waited = true
	if a.pred != "" {
		// If it goes in a release, however we learn it, the marker is
		// ours to delete.
		a.lastPred = a.pred
	}
	rev, released, err := a.waitChange(ctx)
	switch {
	case err == nil && released:
		// The entry we waited for went in its holder's release, with a
		// marker: it was an Exclusive holder, so every older entry had
		// gone before, and none can come (etcd numbers new entries above
		// every existing one); and only readers were between it and ours
		// when we read the queue (nothing, if we are Exclusive), nor can
		// one come. The rule grants us: no read. It is not checked that
		// our own entry still exists: an entry deleted by hand while its
		// lease lives goes unseen here (docs/etcd.md); one whose lease
		// expired is caught by freshen, as its last renewal is then older
		// than the TTL.
		a.byRead = false
		a.granted()
	case err == nil:
		// It went otherwise (a waiter that gave up or died, a holder
		// whose lease expired, a Shared holder's release), or was granted
		// (a semaphore's waiter), or before our watch started: read the
		// queue, which also checks that our entry still exists.
		a.rewatch, a.byRead = backoff{}, true
		a.evaluateAt(rev)
	case errors.Is(err, errWatch):
		a.byRead = true
		if err = a.rewatch.wait(ctx); err == nil {
			a.evaluateAt(a.seen)
		}
	}
	return err
}

// touch tells the waiter behind a semaphore's newly granted waiter, which
// waits for our entry to go or be granted (queue.go), that it was granted:
// a write to our entry that changes nothing but its mod revision
// (stepTouch).
func (a *attempt) touch(ctx context.Context) error {
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Txn: if our entry is the one we created, put it again, same
		// value, same lease. Idempotent: a retry only wakes that waiter
		// once more.
		resp, err = a.d.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)).
			Then(clientv3.OpPut(a.key, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())).
			Commit()
		return err
	})
	if err != nil {
		return a.d.wrapErr("mark the entry granted", err)
	}
	if !resp.Succeeded {
		return errRequeue // our entry is gone
	}
	a.step = stepFreshen
	return nil
}

// waitChange waits until what we wait for changes, keeping our lease alive
// meanwhile: the entry a.pred goes (or, for a semaphore, is granted), or
// one of the entries a.ahead goes. It returns a revision at which the
// change had happened, and whether it was the release of a.pred by its
// holder, with a marker, that proves our grant.
func (a *attempt) waitChange(ctx context.Context) (rev int64, released bool, err error) {
	wctx, cancel := context.WithCancel(watchCtx(ctx))
	defer cancel()
	if h := a.d.beforeWatch; h != nil && a.pred != "" {
		h(ctx, a.pred) // tests only: the window between our read and the watch
	}
	renewed, stopRenewals := a.renewals(ctx)
	defer stopRenewals()
	// The revision at which what we wait for existed, as known before the
	// watch: a renewal's queue check updates a.seen meanwhile.
	seen := a.seen
	// Watch create: the keys that start with the entry's key — the entry
	// and its release marker, no other — or, for a semaphore's first
	// waiter, the directory's deletes; starting now. Not from a.seen+1:
	// etcd serves a watch that starts in the past ("unsynced") from a
	// catch-up loop that runs every 100 ms, so a delete would reach us up
	// to 100 ms late. A watch that starts at the current revision is
	// synced: etcd hands it each event as the event is applied.
	var wch clientv3.WatchChan
	if a.ahead != nil {
		wch = a.d.w.Watch(wctx, a.dir, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	} else {
		wch = a.d.w.Watch(wctx, a.pred, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	}
	started := false // the watch's created response has come
	for {
		select {
		case wr, ok := <-wch:
			// The first response is the watch's creation.
			failed := !ok || wr.Err() != nil || started && wr.Canceled || !started && !wr.Created
			switch {
			case failed && ctx.Err() != nil:
				return 0, false, ctx.Err()
			case failed && !started && ok && isAuthErr(wr.Err()):
				return 0, false, a.d.wrapErr("watch", wr.Err())
			case failed:
				return 0, false, errWatch
			case started:
				if gone, released := a.change(wr.Events); gone != 0 {
					// A renewal that found our place gone wins.
					return gone, released, stopRenewals()
				}
				continue
			}
			// The watch's creation: it sees what happens after its start
			// only, and the change may have happened in between.
			started = true
			if wr.Header.Revision <= seen {
				continue
			}
			check := a.predGone
			if a.ahead != nil {
				check = a.aheadGone
			}
			rev, gone, err := check(ctx, wr.Header.Revision)
			if err == nil && gone {
				err = stopRenewals()
			}
			if err != nil || gone {
				return rev, false, err
			}
		case r := <-renewed:
			return r.rev, false, r.err
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
	}
}

// change decodes the events of a watch response: the revision at which
// what we wait for went (0: it did not), and whether it went in the
// release of a.pred by its holder, with a marker. etcd sends a watch all
// the events of one revision in one response (mvcc's watcherBatch never
// splits a revision), so the marker of a release comes with its delete.
func (a *attempt) change(evs []*clientv3.Event) (gone int64, released bool) {
	var marked int64
	for _, ev := range evs {
		switch key := string(ev.Kv.Key); {
		case a.ahead != nil:
			if a.ahead[key] && ev.Type == mvccpb.DELETE {
				gone = ev.Kv.ModRevision
			}
		case key == a.pred && ev.Type == mvccpb.DELETE:
			gone = ev.Kv.ModRevision
		case key == a.pred && (a.semaphore() || ev.Kv.CreateRevision != a.predRev):
			// Put again: a semaphore's waiter granted (touch), or a new
			// entry of the same name (its lease used again by its
			// client's next call; defence in depth: the read at the
			// watch's start finds that). For another kind a put of the
			// same entry is its holder's Publish, which grants nobody.
			gone = ev.Kv.ModRevision
		case key == markerKey(a.pred) && ev.Type == mvccpb.PUT:
			marked = ev.Kv.ModRevision
		}
	}
	// Only a release puts a marker, in the write that deletes the entry it
	// names, if that entry is the releaser's and Exclusive.
	return gone, a.proof && gone != 0 && marked == gone
}

// renewal is the outcome of a waiter's renewal: an error, or whether the
// entry it waits for is gone, at revision rev.
type renewal struct {
	rev  int64
	gone bool
	err  error
}

// renewals renews our lease beside the wait, a third of its TTL after
// each renewal, checking the queue at the first and then once a TTL (see
// checkQueue). They run beside it so that a release is acted on at once
// even while a renewal waits for a busy etcd (under a burst of thousands
// of waiters, keep-alives can take seconds); and they start before the
// watch does: etcd's client sends a stream's watch creations one at a
// time, all of a Client's watches share one stream, and a waiter's watch
// can take longer than its TTL to start behind those of the waiters that
// queued just before it (TestWait_renewsWhileWatchStarts, docs/etcd.md).
//
// The first renewal that ends the wait (an error, or what we wait for
// gone) comes on the channel. stop ends the renewals and returns
// errRequeue if one found our place gone: then nothing may be granted.
// Meanwhile the wait reads only what a renewal does not write (a.pred,
// a.ahead, a.dir; not a.seen nor a.l).
func (a *attempt) renewals(ctx context.Context) (<-chan renewal, func() error) {
	ctx, cancel := context.WithCancel(ctx)
	out, done := make(chan renewal, 1), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(a.renewIn())
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
			r := renewal{err: a.renewWhileWaiting(ctx)}
			if r.err == nil && i%3 == 0 {
				r.rev, r.gone, r.err = a.checkQueue(ctx)
			}
			if r.err != nil || r.gone {
				out <- r
				return
			}
			t.Reset(a.renewIn())
		}
	}()
	return out, func() error {
		cancel()
		<-done
		select {
		case r := <-out:
			if errors.Is(r.err, errRequeue) {
				return r.err
			}
		default:
		}
		return nil
	}
}

// checkQueue reads whether our entry and the entry we wait for still
// exist. Neither is needed while nobody edits the queue by hand, and both
// are cheap (two keys, once a TTL: a burst of 10,000 waiters already sends
// 3,000 keep-alives a second, and does not need as many reads as well).
// Our entry: a hand-deleted entry whose lease lives would otherwise be
// granted the key at the release ahead of it, as the grant does not read
// the queue; this check narrows that to a deletion in the last TTL before
// the grant. The entry ahead: the tail that named it in our join vouches
// for it only while the queue is not edited by hand; without the check, a
// waiter could wait for an entry deleted before its watch began, forever.
// It returns errRequeue if our entry is gone, and whether the entry ahead
// is (or changed), at the revision returned. A semaphore's first waiter,
// which waits for entries it read itself, checks its own entry only.
func (a *attempt) checkQueue(ctx context.Context) (int64, bool, error) {
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Txn, read-only: the two keys. Serializable if the member has
		// applied our join (it could not show our entry before), else
		// linearizable.
		get := func(serializable bool) (*clientv3.TxnResponse, error) {
			opts := []clientv3.OpOption{clientv3.WithKeysOnly()}
			if serializable {
				opts = append(opts, clientv3.WithSerializable())
			}
			ops := []clientv3.Op{clientv3.OpGet(a.key, opts...)}
			if a.pred != "" {
				ops = append(ops, clientv3.OpGet(a.pred, opts...))
			}
			return a.d.kv.Txn(ctx).Then(ops...).Commit()
		}
		resp, err = get(true)
		if err == nil && resp.Header.Revision < a.seen {
			resp, err = get(false)
		}
		return err
	})
	if err != nil {
		return 0, false, a.d.wrapErr("read the queue", err)
	}
	ours := resp.Responses[0].GetResponseRange().Kvs
	if len(ours) == 0 || ours[0].CreateRevision != a.rev {
		return 0, false, errRequeue
	}
	if a.pred != "" && a.predChanged(resp.Responses[1].GetResponseRange().Kvs) {
		return resp.Header.Revision, true, nil
	}
	a.seen = resp.Header.Revision
	return a.seen, false, nil
}

// predChanged reports whether kvs, a read of a.pred, shows it gone or, for
// a semaphore's waiter, written since it was created: a semaphore's waiter
// that was granted writes to its entry (touch), and nothing else writes to
// a waiter's entry. Other kinds look at the create revision alone: the
// entry they wait for may be a holder that rewrote its metadata (Publish),
// which changes its mod revision and grants nobody.
func (a *attempt) predChanged(kvs []*mvccpb.KeyValue) bool {
	if len(kvs) == 0 || kvs[0].CreateRevision != a.predRev {
		return true
	}
	return a.semaphore() && kvs[0].ModRevision != a.predRev
}

// predGone reads whether the entry we wait for is gone (or changed), at a
// revision not older than minRev, and returns that revision.
func (a *attempt) predGone(ctx context.Context, minRev int64) (int64, bool, error) {
	var resp *clientv3.GetResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Range, that one key: serializable if the member has applied
		// minRev, else linearizable.
		resp, err = a.d.kv.Get(ctx, a.pred, clientv3.WithKeysOnly(), clientv3.WithSerializable())
		if err == nil && resp.Header.Revision < minRev {
			resp, err = a.d.kv.Get(ctx, a.pred, clientv3.WithKeysOnly())
		}
		return err
	})
	if err != nil {
		return 0, false, a.d.wrapErr("read the queue", err)
	}
	return resp.Header.Revision, a.predChanged(resp.Kvs), nil
}

// aheadGone reads whether one of the entries ahead of a semaphore's first
// waiter is gone, at a revision not older than minRev, and returns that
// revision: the oldest keys of the queue, keys only.
func (a *attempt) aheadGone(ctx context.Context, minRev int64) (int64, bool, error) {
	resp, err := a.getQueue(ctx, minRev, clientv3.WithKeysOnly(), clientv3.WithLimit(int64(len(a.ahead)+queueReadLimit)),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return 0, false, err
	}
	there := 0
	for _, kv := range resp.Kvs {
		if a.ahead[string(kv.Key)] {
			there++
		}
	}
	return resp.Header.Revision, there < len(a.ahead), nil
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
// This is why a waiter's lease is not the lease engine's: the engine gives
// a grant up at its local deadline.
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
		return a.loseLease() // the lease is gone: so is our entry
	case kctx.Err() != nil:
		return nil // overdue: renewIn is past, so the loop tries again at once
	}
	return a.d.wrapErr("renew the lease", err)
}

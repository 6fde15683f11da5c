package etcddlock

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/dlockdev/dlock/driver"
	leng "github.com/dlockdev/dlock/internal/lease"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// wait waits for what the plan names to change (stepWait).
func (a *attempt) wait(ctx context.Context) error {
	// If pred goes in a release, however we learn it, its marker is ours to delete.
	a.lastPred = cmp.Or(a.pred, a.lastPred)
	rev, released, err := a.waitChange(ctx)
	a.byRead = !released
	if err != nil || released {
		a.unwatch(nil) // a semaphore's kept watches serve only the read after a wake
	}
	switch {
	case errors.Is(err, driver.ErrNotHeld):
		err = a.loseLease() // a renewal found the lease gone, and our entry with it
	case err == nil && released:
		// By its Exclusive holder's release, or a semaphore's count of
		// departures, with no read (docs/etcd.md, Operations, Lock 4).
		a.granted()
	case err == nil:
		// Gone otherwise, or granted (a semaphore's waiter): read the
		// queue, which also checks that our entry still exists.
		a.rewatch, a.minRev, a.step = backoff{}, rev, stepEvaluate
	case errors.Is(err, errWatch):
		if err = a.rewatch.wait(ctx); err == nil {
			a.minRev, a.step = a.seen, stepEvaluate
		}
	}
	return err
}

// waitChange waits, renewing our lease, until a.pred goes or a.need of
// a.ahead went. It returns a revision at which that had happened, and
// whether a release marker, or the count, proves our grant.
func (a *attempt) waitChange(ctx context.Context) (rev int64, released bool, err error) {
	wctx, cancel := context.WithCancel(watchCtx(ctx))
	defer cancel()
	if h := a.d.beforeWatch; h != nil && (a.pred != "" || a.ahead != nil) {
		h(ctx, a.pred) // tests only: the window between our read and the watch
	}
	seen := a.seen // renewals write a.seen meanwhile
	// Before the watch, whose creation can take longer than a TTL (docs/etcd.md).
	renewals, gone := a.renewals()
	stop := func() error {
		// A renewal that found our place gone wins.
		if err := renewals.Stop(); errors.Is(err, errRequeue) || errors.Is(err, driver.ErrNotHeld) {
			return err
		}
		return nil
	}
	defer stop()
	// Watch create, from now (docs/etcd.md, Operations, Lock 3): the keys
	// that start with the entry's key (the entry and its marker), or, for
	// a semaphore's waiter, the deletes of each key of a.ahead, one watch
	// a key, so that a release reaches only the waiters that count it;
	// those its last wait started that it still counts go on.
	w := a.watches(wctx)
	started := w.pending == 0 // every watch's created response has come
	createdRev := int64(0)    // the newest created response of this wait
	went := map[string]bool{} // the entries of a.ahead seen go
	var delayed <-chan time.Time
	if !a.delayUntil.IsZero() {
		// A lock-delay ahead ends then: read the queue again.
		t := time.NewTimer(time.Until(a.delayUntil))
		defer t.Stop()
		delayed = t.C
	}
	w.cases[caseDelayed].Chan = reflect.ValueOf(delayed)
	w.cases[caseFailed].Chan = reflect.ValueOf(renewals.Failed())
	w.cases[caseDone].Chan = reflect.ValueOf(ctx.Done())
	for {
		i, v, ok := reflect.Select(w.cases)
		switch i {
		case caseDelayed:
			return seen, false, stop()
		case caseFailed:
			err, _ := v.Interface().(error)
			if errors.Is(err, errGone) {
				return *gone, false, nil
			}
			return 0, false, err
		case caseDone:
			return 0, false, ctx.Err()
		}
		var wr clientv3.WatchResponse
		if ok {
			wr = v.Interface().(clientv3.WatchResponse)
		}
		// The first response of each watch is its creation.
		kw := w.watches[i-caseWatches]
		first := !kw.created
		failed := !ok || wr.Err() != nil || !first && wr.Canceled || first && !wr.Created
		switch {
		case failed && ctx.Err() != nil:
			return 0, false, ctx.Err()
		case failed && first && ok && isAuthErr(wr.Err()):
			return 0, false, a.d.wrapErr("watch", wr.Err())
		case failed:
			return 0, false, errWatch
		case !first:
			if rev, released := a.change(wr.Events, went); rev != 0 {
				return rev, released, stop()
			}
			continue
		}
		kw.created, w.pending = true, w.pending-1
		createdRev = max(createdRev, wr.Header.Revision)
		if w.pending > 0 || started {
			continue
		}
		// All created: the change may have come before they started.
		started = true
		if createdRev <= seen {
			continue
		}
		rev, gone, missing, err := a.check(ctx, createdRev)
		if err == nil && gone && missing != nil {
			// Entries we count went before the watches began: count
			// them too (a delete after it comes again, counted once).
			for _, k := range missing {
				went[k] = true
			}
			if gone = len(went) >= a.need; gone {
				return rev, a.counted, stop()
			}
		}
		if err != nil || gone {
			return rev, false, cmp.Or(err, stop())
		}
	}
}

// The cases of a wait's select (watchSet.cases) before its watches'.
const (
	caseDelayed = iota // a lock-delay ahead ends
	caseFailed         // a renewal failed, or found what we wait for gone
	caseDone           // the call's context ended
	caseWatches        // the first watch
)

// watchSet is a wait's watches, merged by one select with no goroutine
// of ours: one a key of a semaphore's waiter, on the client's one stream.
type watchSet struct {
	cases   []reflect.SelectCase
	watches []*keyWatch // by case, from caseWatches on
	pending int         // watches whose created response has not come
}

// keyWatch is one watch of a wait.
type keyWatch struct {
	ch      clientv3.WatchChan
	cancel  func() // nil: it ends with its wait
	created bool   // its created response has come
}

// watches returns the wait's watches: the prefix of a.pred, created now
// and cancelled with ctx; or each key of a.ahead, kept in a.watching from
// one wait to the next of the attempt until unwatch: a later waiter's
// watches go on, started, when the read after its wake makes it one of
// the first limit waiters, which then counts on them (evaluate).
func (a *attempt) watches(ctx context.Context) *watchSet {
	w := &watchSet{cases: make([]reflect.SelectCase, caseWatches, caseWatches+max(1, len(a.ahead)))}
	for i := range w.cases {
		w.cases[i].Dir = reflect.SelectRecv
	}
	add := func(kw *keyWatch) {
		w.cases = append(w.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(kw.ch)})
		w.watches = append(w.watches, kw)
		if !kw.created {
			w.pending++
		}
	}
	if a.ahead == nil {
		a.unwatch(nil)
		add(&keyWatch{ch: a.d.w.Watch(ctx, a.pred, clientv3.WithPrefix(), clientv3.WithCreatedNotify())})
		return w
	}
	a.unwatch(a.ahead)
	if a.watching == nil {
		a.watching = make(map[string]*keyWatch, len(a.ahead))
	}
	for _, k := range slices.Sorted(maps.Keys(a.ahead)) {
		kw := a.watching[k]
		if kw == nil {
			// Beyond this wait, on the same stream (watchCtx's metadata).
			kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			kw = &keyWatch{cancel: cancel}
			kw.ch = a.d.w.Watch(kctx, k, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
			a.watching[k] = kw
		}
		add(kw)
	}
	return w
}

// unwatch cancels a semaphore's kept watches of the keys not in keep.
func (a *attempt) unwatch(keep map[string]bool) {
	for k, kw := range a.watching {
		if !keep[k] {
			kw.cancel()
			delete(a.watching, k)
		}
	}
}

// change decodes a watch response: the revision at which what we wait for
// went (0: it did not), and whether a release marker came with it (etcd
// never splits a revision's events across responses), or the count grants
// us. went collects the entries of a.ahead seen go, each counted once: a
// later entry of the same name (its lease reused) is behind ours.
//
// The count's grant: the read that planned it saw every entry ahead of
// ours (a complete listing) and no lock-delay record; entries ahead only
// go, so once need of them went fewer than limit are ahead, and the rule
// grants our entry if it still existed then. Nothing reads that it did
// (a round trip per grant; no watch of ours sees its delete, and watches
// of several keys keep no order between them): our entry, on our lease,
// goes only by our own delete (none while we wait), with the lease, or
// by hand. freshen proves the lease alive at the grant (renewed less
// than half a TTL ago, or renewed then, and not given up by this Client,
// which marks it before it revokes it), so it was alive at every earlier
// revision. A delete or revoke by hand is what a lock's hand-off does
// not check either (docs/etcd.md): the renewals' check finds it within a
// TTL while we wait, and a grant on it ends at its first renewal.
func (a *attempt) change(evs []*clientv3.Event, went map[string]bool) (gone int64, released bool) {
	var marked int64
	for _, ev := range evs {
		switch key := string(ev.Kv.Key); {
		case a.ahead != nil:
			if a.ahead[key] && !went[key] && ev.Type == mvccpb.DELETE {
				if went[key] = true; len(went) >= a.need {
					return ev.Kv.ModRevision, a.counted
				}
			}
		case key == a.pred && ev.Type == mvccpb.DELETE:
			gone = ev.Kv.ModRevision
		case key == a.pred && ev.Kv.CreateRevision != a.predRev:
			// A new entry of that name (its lease reused); a put of the
			// same entry is a Publish, which grants nobody.
			gone = ev.Kv.ModRevision
		case key == markerKey(a.pred) && ev.Type == mvccpb.PUT:
			marked = ev.Kv.ModRevision
		}
	}
	// Only an Exclusive holder's release puts a marker, with its delete.
	return gone, a.proof && gone != 0 && marked == gone
}

// errGone: a renewal's check found what we wait for gone.
var errGone = errors.New("etcddlock: entry waited for gone")

// renewals renews our lease while we wait, and checks the queue at the
// first renewal and then once a TTL (docs/etcd.md, Operations, Lock 5),
// writing a.seen (which the wait does not read meanwhile) and *gone.
func (a *attempt) renewals() (w *leng.Waiter, gone *int64) {
	gone, n := new(int64), 0
	return leng.StartWaiter(a.l.since(), a.l.ttl, func(ctx context.Context) error {
		// LeaseKeepAlive, unless another call of the lease just sent one.
		err := retry(ctx, func(ctx context.Context) error { return a.l.keepAliveShared(ctx, a.d) })
		if err = a.d.wrapErr("renew the lease", err); err != nil {
			return err
		}
		if n++; n%3 != 1 {
			return nil
		}
		rev, changed, _, err := a.check(ctx, a.seen)
		switch {
		case changed:
			*gone, err = rev, errGone
		case err == nil:
			a.seen = rev
		}
		return err
	}), gone
}

// check reads, at minRev or later, whether our entry and what we wait for
// still exist, and returns the read's revision: errRequeue if ours is
// gone; changed if what we wait for is, or any of a.ahead, and then
// missing, the keys of a.ahead gone, if the read reached our entry's
// elders all (else a key not read is not known gone). A hand-made delete
// of either would otherwise go unseen.
func (a *attempt) check(ctx context.Context, minRev int64) (rev int64, changed bool, missing []string, err error) {
	var resp *clientv3.TxnResponse
	err = a.fresh(ctx, minRev, func(ctx context.Context, opts ...clientv3.OpOption) (rev int64, err error) {
		// Txn, read-only, keys only: our entry (the member could not show
		// it before it applied our join), and the entry we wait for, or
		// the newest keys of the queue up to ours, among them those we
		// wait for (the nearest entries ahead, or all of them).
		opts = append(opts, clientv3.WithKeysOnly())
		waited := clientv3.OpGet(a.pred, opts...)
		if a.ahead != nil {
			waited = clientv3.OpGet(a.dir, append(opts, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(a.rev),
				clientv3.WithLimit(int64(2*len(a.ahead)+queueReadLimit)), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))...)
		}
		if resp, err = a.d.kv.Txn(ctx).Then(clientv3.OpGet(a.key, opts...), waited).Commit(); err == nil {
			rev = resp.Header.Revision
		}
		return rev, err
	})
	if err != nil {
		return 0, false, nil, err
	}
	ours, waited := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange()
	if len(ours) == 0 || ours[0].CreateRevision != a.rev {
		return 0, false, nil, errRequeue
	}
	kvs := waited.Kvs
	if a.ahead != nil {
		there := make(map[string]bool, len(a.ahead))
		for _, kv := range kvs {
			if a.ahead[string(kv.Key)] {
				there[string(kv.Key)] = true
			}
		}
		changed = len(there) < len(a.ahead)
		if changed && !waited.More {
			missing = []string{}
			for k := range a.ahead {
				if !there[k] {
					missing = append(missing, k)
				}
			}
		}
		return resp.Header.Revision, changed, missing, nil
	}
	// The create revision alone: a holder's Publish changes its mod
	// revision and grants nobody.
	changed = len(kvs) == 0 || kvs[0].CreateRevision != a.predRev
	return resp.Header.Revision, changed, nil, nil
}

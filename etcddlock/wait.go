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
	// a key, so that a release reaches only the waiters that count it.
	w := a.watches(wctx)
	started := false // every watch's created response has come
	created, createdRev := 0, int64(0)
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
		first := !w.created[i]
		failed := !ok || wr.Err() != nil || !first && wr.Canceled || first && !wr.Created
		switch {
		case failed && ctx.Err() != nil:
			return 0, false, ctx.Err()
		case failed && first && ok && isAuthErr(wr.Err()):
			return 0, false, a.d.wrapErr("watch", wr.Err())
		case failed:
			return 0, false, errWatch
		case !first:
			rev, released := a.change(wr.Events, went)
			if rev != 0 && released && a.ahead != nil {
				// The count's grant: our entry stood at its revision.
				released, err := a.stands(ctx, rev)
				return rev, released, cmp.Or(err, stop())
			}
			if rev != 0 {
				return rev, released, stop()
			}
			continue
		}
		w.created[i] = true
		created, createdRev = created+1, max(createdRev, wr.Header.Revision)
		if created < len(w.created)-caseWatches || started {
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
	created []bool // by case: that watch's created response has come
}

// watches creates the wait's watches (cancelled with ctx): the prefix of
// a.pred, or each key of a.ahead.
func (a *attempt) watches(ctx context.Context) *watchSet {
	keys := []string{a.pred}
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
	if a.ahead != nil {
		keys = slices.Sorted(maps.Keys(a.ahead))
		opts = []clientv3.OpOption{clientv3.WithFilterPut(), clientv3.WithCreatedNotify()}
	}
	w := &watchSet{
		cases:   make([]reflect.SelectCase, caseWatches, caseWatches+len(keys)),
		created: make([]bool, caseWatches, caseWatches+len(keys)),
	}
	for i := range w.cases {
		w.cases[i].Dir = reflect.SelectRecv
	}
	for _, k := range keys {
		wch := a.d.w.Watch(ctx, k, opts...)
		w.cases = append(w.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(wch)})
		w.created = append(w.created, false)
	}
	return w
}

// stands reads whether our entry still stood at rev: the count's grant
// holds only for an entry that was in the queue when the count completed,
// and a delete of ours comes on no watch of ours.
func (a *attempt) stands(ctx context.Context, rev int64) (bool, error) {
	var resp *clientv3.GetResponse
	err := a.fresh(ctx, rev, func(ctx context.Context, opts ...clientv3.OpOption) (int64, error) {
		// Range, our entry's key alone, keys only.
		var err error
		if resp, err = a.d.kv.Get(ctx, a.key, append(opts, clientv3.WithKeysOnly())...); err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	})
	if err != nil {
		return false, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != a.rev {
		return false, nil // the read of the queue finds it gone
	}
	return true, nil
}

// change decodes a watch response: the revision at which what we wait for
// went (0: it did not), and whether a release marker came with it (etcd
// never splits a revision's events across responses), or the count grants
// us. went collects the entries of a.ahead seen go, each counted once: a
// later entry of the same name (its lease reused) is behind ours.
//
// The count's grant: the read that planned it saw every entry ahead of
// ours (a complete listing) and no lock-delay record; entries ahead only
// go, so once need of them went fewer than limit are ahead, and the
// rule grants our entry if it still existed then, which waitChange reads
// (stands): no watch of ours sees its delete (an expiry, a revoke, by
// hand), and the watches of several keys keep no order between them.
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

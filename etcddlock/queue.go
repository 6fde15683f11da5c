package etcddlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/driver/queue"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// What a waiter reads and waits for: docs/etcd.md (What each waiter waits
// for), planned by driver/queue, whose package doc maps it.

// queueReadLimit is how many keys a read of the queue returns at first: our
// entry, the one ahead, and room for release markers.
const queueReadLimit = 8

// foreignLabel labels an entry dlock cannot have written: no kind's, so
// the planner counts it as Exclusive.
const foreignLabel = "?"

// evaluate reads the queue at a.minRev or later and plans our wait
// (stepEvaluate).
func (a *attempt) evaluate(ctx context.Context) error {
	if a.rev == 0 {
		return errRequeue
	}
	p, ahead, err := a.scan(ctx)
	if err != nil {
		return err
	}
	if again, err := a.sitOut(ctx, ahead); err != nil || again {
		a.minRev = a.seen // lock-delays over, their records deleted: read again
		return err
	}
	a.pred, a.predRev, a.ahead, a.need, a.counted, a.proof = "", 0, nil, 0, false, p.ExclusiveRelease
	switch {
	case p.Verdict == queue.Granted:
		a.granted()
	case p.Verdict == queue.WaitFor && p.Notice:
		// A permit's later waiter: it cannot be granted while limit of
		// the limit+1 entries nearest ahead of it (from the one before
		// Target) stand, and waits for a delete of any of them, not for
		// Target's grant, which nobody writes down. The one farthest
		// ahead goes first as a rule, with limit entries left ahead of
		// us: the read after it makes us one of the first limit
		// waiters, counting on these watches, kept (wait.go), the
		// delete that grants us. An entry is watched by limit+1
		// waiters at most (no more than 2·limit): the first limit, and
		// later ones at most limit+1 places behind it.
		a.waitDeletes(ahead[max(0, p.Target-1):], 1, false)
	case p.Verdict == queue.WaitFor:
		a.pred, a.predRev, a.step = string(ahead[p.Target].Key), ahead[p.Target].CreateRevision, stepWait
	case p.Verdict == queue.WaitAny:
		// One of a semaphore's first limit waiters (Listing.Parallel):
		// every entry ahead was read, and Need of them must go. Their
		// deletes grant us with no read, unless one of them may leave
		// a lock-delay behind, which holds its permit on.
		a.waitDeletes(ahead, p.Need, !a.delaysAhead)
	default:
		return fmt.Errorf("etcddlock: queue %q: unexpected plan %v", a.dir, p.Verdict)
	}
	return nil
}

// waitDeletes has the wait count deletes of the entries kvs until need of
// them went: then we are granted if counted, else read the queue again.
func (a *attempt) waitDeletes(kvs []*mvccpb.KeyValue, need int, counted bool) {
	a.ahead, a.need, a.counted, a.step = make(map[string]bool, len(kvs)), need, counted, stepWait
	for _, kv := range kvs {
		a.ahead[string(kv.Key)] = true
	}
}

// scan reads the queue newest first, from our entry or, with none yet,
// from its end, in pages eightfold larger each
// time, until the planner decides over the entries read ahead of ours,
// which it returns oldest first. errRequeue: our entry is gone.
func (a *attempt) scan(ctx context.Context) (queue.Plan, []*mvccpb.KeyValue, error) {
	// A reader reads the values (the modes), and so does a call with no
	// entry (the kind check); a semaphore's are all Shared of its label.
	fromEnd := a.rev == 0
	values := fromEnd || a.req.Mode == driver.Shared && !a.semaphore()
	limit := int64(queueReadLimit)
	switch {
	case a.semaphore():
		// The holders and the first limit waiters (queue.Listing.Parallel).
		limit += 2 * int64(a.req.Limit)
	case fromEnd && a.req.Mode == driver.Shared:
		limit = 0 // all: one writer anywhere refuses a reader
	}
	for ; ; limit *= 8 {
		var resp *clientv3.GetResponse
		err := a.fresh(ctx, a.minRev, func(ctx context.Context, opts ...clientv3.OpOption) (rev int64, err error) {
			// Range over the queue up to our entry (if any), newest first.
			opts = append(opts, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(a.rev), clientv3.WithLimit(limit),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))
			if !values {
				opts = append(opts, clientv3.WithKeysOnly())
			}
			if resp, err = a.d.kv.Get(ctx, a.dir, opts...); err == nil {
				rev = resp.Header.Revision
			}
			return rev, err
		})
		if err != nil {
			return queue.Plan{}, nil, err
		}
		kvs := resp.Kvs
		if own := a.delayRecord(); own != "" {
			// Our delay record shares our create revision: it may come
			// before our entry.
			kvs = slices.DeleteFunc(kvs, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == own })
		}
		if !fromEnd {
			if len(kvs) == 0 || string(kvs[0].Key) != a.key || kvs[0].CreateRevision != a.rev {
				return queue.Plan{}, nil, errRequeue
			}
			kvs = kvs[1:]
		}
		a.seen = resp.Header.Revision
		a.delaysAhead = slices.ContainsFunc(kvs, func(kv *mvccpb.KeyValue) bool {
			_, _, _, ok := parseDelay(a.dir, string(kv.Key))
			return ok
		})
		var ahead []*mvccpb.KeyValue
		var es []queue.Entry
		ended := endedRecords(a.dir, kvs)
		if resp.More && len(kvs) != 0 {
			// The entry of a record at the page's oldest revision may
			// be on the next page.
			for k, r := range ended {
				if r.CreateRevision == kvs[len(kvs)-1].CreateRevision {
					delete(ended, k)
				}
			}
		}
		for _, kv := range slices.Backward(kvs) {
			if ended[string(kv.Key)] != nil {
				// An ended entry with a lock-delay: a holder of its mode
				// until the delay is over (lockdelay.go).
				_, m, _, _ := parseDelay(a.dir, string(kv.Key))
				ahead, es = append(ahead, kv), append(es, a.phantom(m))
				continue
			}
			if !isEntry(a.dir, string(kv.Key)) {
				continue
			}
			// Read with its value, or a semaphore's, or mode and kind unknown.
			e := queue.Entry{}
			if label, m, _ := parseEntry(kv.Value); values {
				e = queue.Entry{Mode: m, Label: cmp.Or(label, foreignLabel)}
			} else if a.semaphore() {
				e = queue.Entry{Mode: driver.Shared, Label: a.label}
			}
			ahead, es = append(ahead, kv), append(es, e)
		}
		if p := queue.Decide(a.listing(es, !resp.More)); p.Verdict != queue.NeedMore {
			return p, ahead, nil
		}
		if !resp.More {
			return queue.Plan{}, nil, errRequeue // nothing left to read: our place is not what we knew
		}
	}
}

// listing is the queue.Listing of our entry behind ahead, oldest first,
// which are every entry ahead of it if all. A call with no entry yet
// refuses another kind; a queued one waits behind it (a hand-made entry).
func (a *attempt) listing(ahead []queue.Entry, all bool) queue.Listing {
	l := queue.Listing{Ahead: ahead, Complete: all, Mode: a.req.Mode, Label: a.label, OtherKind: queue.AsExclusive}
	if a.rev == 0 {
		l.OtherKind = queue.Refuse
	}
	if a.semaphore() {
		// Parallel: the first limit waiters each count departures, and
		// a later waiter waits for the limit entries nearest ahead of
		// it (evaluate): no waiter waits for another's grant notice.
		l.Limit, l.Parallel = a.req.Limit, true
	}
	return l
}

// fresh runs read serializable (no leader round) if the member has
// applied minRev, else again linearizable: after minRev the entries older
// than ours can only have gone. read returns its reply's revision.
func (a *attempt) fresh(ctx context.Context, minRev int64, read func(ctx context.Context, opts ...clientv3.OpOption) (int64, error)) error {
	err := retry(ctx, func(ctx context.Context) error {
		rev, err := read(ctx, clientv3.WithSerializable())
		if err == nil && rev < minRev {
			_, err = read(ctx)
		}
		return err
	})
	return a.d.wrapErr("read the queue", err)
}

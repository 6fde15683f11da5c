package etcddlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/driver/queue"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// What a waiter reads and waits for: docs/etcd.md (What each waiter waits
// for), planned by driver/queue, whose package doc maps it.

// queueReadLimit is how many keys a read of the queue returns at first: our
// entry, the one ahead, and room for release markers.
const queueReadLimit = 8

// foreignLabel labels an entry dlock cannot have written: no kind's, so
// the planner counts it as Exclusive.
const foreignLabel = "?"

// errCompacted means that a read at a past revision found it compacted.
var errCompacted = errors.New("etcddlock: revision compacted")

// evaluate reads the queue at a.minRev or later and plans our wait
// (stepEvaluate).
func (a *attempt) evaluate(ctx context.Context) error {
	if a.rev == 0 {
		return errRequeue
	}
	at := int64(0)
	if a.semaphore() && !a.waited {
		// A permit's first count reads the queue as at our entry's
		// creation: then "not granted" is exactly "somebody may have
		// seen us wait" (and waits for our touch).
		at = a.rev
	}
	p, ahead, err := a.scan(ctx, at)
	if errors.Is(err, errCompacted) {
		a.waited = true // count now, and touch as if we had waited
		p, ahead, err = a.scan(ctx, 0)
	}
	if err != nil {
		return err
	}
	if again, err := a.sitOut(ctx, ahead); err != nil || again {
		a.minRev = a.seen // lock-delays over, their records deleted: read again
		return err
	}
	a.pred, a.predRev, a.ahead, a.proof = "", 0, nil, p.ExclusiveRelease
	switch p.Verdict {
	case queue.Granted:
		a.granted()
	case queue.WaitFor:
		a.pred, a.predRev, a.step = string(ahead[p.Target].Key), ahead[p.Target].CreateRevision, stepWait
	case queue.WaitAny:
		a.ahead, a.step = make(map[string]bool, p.Any), stepWait
		for _, kv := range ahead[len(ahead)-p.Any:] {
			a.ahead[string(kv.Key)] = true
		}
	default:
		return fmt.Errorf("etcddlock: queue %q: unexpected plan %v", a.dir, p.Verdict)
	}
	return nil
}

// scan reads the queue newest first, from our entry (at revision at, if
// not 0) or, with none yet, from its end, in pages eightfold larger each
// time, until the planner decides over the entries read ahead of ours,
// which it returns oldest first. errRequeue: our entry is gone.
func (a *attempt) scan(ctx context.Context, at int64) (queue.Plan, []*mvccpb.KeyValue, error) {
	// A reader reads the values (the modes), and so does a call with no
	// entry (the kind check); a semaphore's are all Shared of its label.
	fromEnd := a.rev == 0
	values := fromEnd || a.req.Mode == driver.Shared && !a.semaphore()
	limit := int64(queueReadLimit)
	switch {
	case a.semaphore():
		limit += int64(a.req.Limit) + 1 // the holders, and one to tell a later waiter
	case fromEnd && a.req.Mode == driver.Shared:
		limit = 0 // all: one writer anywhere refuses a reader
	}
	for ; ; limit *= 8 {
		var resp *clientv3.GetResponse
		err := a.fresh(ctx, a.minRev, func(ctx context.Context, opts ...clientv3.OpOption) (rev int64, err error) {
			// Range over the queue up to our entry (if any), newest first
			// (at revision 0: the current one).
			opts = append(opts, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(a.rev), clientv3.WithLimit(limit),
				clientv3.WithRev(at), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))
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
		a.seen = cmp.Or(at, resp.Header.Revision)
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
		l.Limit = a.req.Limit
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
	if err != nil && code(err) == codes.OutOfRange {
		return errCompacted
	}
	return a.d.wrapErr("read the queue", err)
}

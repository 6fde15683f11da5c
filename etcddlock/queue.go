package etcddlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/driver/queue"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// The grant rule (driver.Admits) on etcd: entries are ordered by create
// revision, new ones go behind every existing one, so the entries ahead of
// ours only go and a granted entry stays granted. A waiter reads the queue
// when it joins and when what it waits for changes, and queue.Decide plans
// from the read the one change that can grant it, so that a release wakes
// only the waiters it can make grantable (plus a semaphore's next first
// waiter). An Exclusive entry reads the newest older key, keys only; a
// reader, the newest keys with their values, in pages, until a writer or
// the head; a permit of N, the oldest N+1 keys: the first waiter waits for
// any of the N holders to go (a watch of the directory's deletes), a later
// one for the entry just ahead to go or to be granted (a semaphore's waiter
// granted after waiting touches its entry). A release marker (written by
// Exclusive holders only, see Release) in the revision of the delete of the
// entry waited for proves the grant without a read
// (queue.Plan.ExclusiveRelease); etcd takes no other proof from an event.

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
	atJoin := a.atJoin
	a.atJoin = false
	if a.semaphore() {
		// The first count reads the queue as at our entry's creation:
		// then "not granted" is exactly "somebody may have seen us wait"
		// (and waits for our touch).
		at := int64(0)
		if atJoin {
			at = a.rev
		}
		return a.follow(a.evalPermit(ctx, atJoin && a.pred != "", at))
	}
	values := a.req.Mode == driver.Shared // a reader needs the modes
	return a.follow(a.scan(ctx, a.minRev, 0, values, func(ahead []*mvccpb.KeyValue, all bool) queue.Plan {
		return queue.Decide(a.listing(a.entries(ahead, values), all))
	}))
}

// follow sets what we wait for from p, a plan over the entries ahead, or
// returns err.
func (a *attempt) follow(p queue.Plan, ahead []*mvccpb.KeyValue, err error) error {
	if err != nil {
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

// listing is the queue.Listing of our entry behind ahead, oldest first,
// which are every entry ahead of it if all.
func (a *attempt) listing(ahead []queue.Entry, all bool) queue.Listing {
	l := queue.Listing{Ahead: ahead, Complete: all, Mode: a.req.Mode, Label: a.label, OtherKind: queue.AsExclusive}
	if a.semaphore() {
		l.Limit = a.req.Limit
	}
	return l
}

// entries are the planner's entries of kvs: read with their values, or a
// semaphore's (all Shared of its label: the kind check), or unknown.
func (a *attempt) entries(kvs []*mvccpb.KeyValue, values bool) []queue.Entry {
	es := make([]queue.Entry, len(kvs))
	for i, kv := range kvs {
		switch {
		case values:
			label, m, _ := parseEntry(kv.Value)
			es[i] = queue.Entry{Mode: m, Label: cmp.Or(label, foreignLabel)}
		case a.semaphore():
			es[i] = queue.Entry{Mode: driver.Shared, Label: a.label}
		}
	}
	return es
}

// getQueue reads the keys of the queue up to our entry with opts, at minRev
// or later: serializable (no leader round) if the member has applied
// minRev, after which entries older than ours can only have gone.
func (a *attempt) getQueue(ctx context.Context, minRev int64, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	opts = append(opts, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(a.rev))
	var resp *clientv3.GetResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Range over the queue up to our entry.
		resp, err = a.d.kv.Get(ctx, a.dir, append(opts, clientv3.WithSerializable())...)
		if err == nil && resp.Header.Revision < minRev {
			resp, err = a.d.kv.Get(ctx, a.dir, opts...)
		}
		return err
	})
	if err != nil {
		if code(err) == codes.OutOfRange {
			return nil, errCompacted
		}
		return nil, a.d.wrapErr("read the queue", err)
	}
	return resp, nil
}

// scan reads the queue newest first from our entry (at revision at, if
// not 0), in pages eightfold larger each time, until decide, given the
// entries read ahead of ours, oldest first, and whether that is all of
// them, plans. errRequeue: our entry is gone.
func (a *attempt) scan(ctx context.Context, minRev, at int64, values bool, decide func(ahead []*mvccpb.KeyValue, all bool) queue.Plan) (queue.Plan, []*mvccpb.KeyValue, error) {
	for limit := int64(queueReadLimit); ; limit *= 8 {
		// At revision 0: the current one.
		opts := []clientv3.OpOption{clientv3.WithLimit(limit), clientv3.WithRev(at), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)}
		if !values {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		resp, err := a.getQueue(ctx, minRev, opts...)
		if err != nil {
			return queue.Plan{}, nil, err
		}
		kvs := resp.Kvs
		if len(kvs) == 0 || string(kvs[0].Key) != a.key || kvs[0].CreateRevision != a.rev {
			return queue.Plan{}, nil, errRequeue
		}
		a.seen = cmp.Or(at, resp.Header.Revision)
		var ahead []*mvccpb.KeyValue
		for i := len(kvs) - 1; i > 0; i-- {
			if isEntry(a.dir, string(kvs[i].Key)) {
				ahead = append(ahead, kvs[i])
			}
		}
		if p := decide(ahead, !resp.More); p.Verdict != queue.NeedMore {
			return p, ahead, nil
		}
		if !resp.More {
			return queue.Plan{}, nil, errRequeue // nothing left to read: our place is not what we knew
		}
	}
}

// evalPermit counts the entries ahead of a semaphore's waiter, oldest
// first, up to one more than the limit (at revision at, if not 0).
// tailKnown: a.pred is the entry the tail named at our join.
func (a *attempt) evalPermit(ctx context.Context, tailKnown bool, at int64) (queue.Plan, []*mvccpb.KeyValue, error) {
	limit := a.req.Limit
	for n := int64(limit + 1 + queueReadLimit); ; n *= 8 {
		resp, err := a.getQueue(ctx, a.minRev, clientv3.WithKeysOnly(), clientv3.WithLimit(n), clientv3.WithRev(at),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if errors.Is(err, errCompacted) {
			// Compacted: count now, and touch as if we had waited.
			a.waited, at, n = true, 0, n/8
			continue
		}
		if err != nil {
			return queue.Plan{}, nil, err
		}
		readRev := cmp.Or(at, resp.Header.Revision)
		var ahead []*mvccpb.KeyValue
		found := false
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			if !isEntry(a.dir, k) {
				continue
			}
			if k == a.key {
				found = kv.CreateRevision == a.rev
				break
			}
			if ahead = append(ahead, kv); len(ahead) > limit {
				break
			}
		}
		switch {
		case found:
			// Every entry ahead: granted, or the first waiter.
			a.seen = readRev
			return queue.Decide(a.listing(a.entries(ahead, false), true)), ahead, nil
		case len(ahead) <= limit && resp.More:
			continue // markers among the oldest keys: read further
		case len(ahead) <= limit:
			return queue.Plan{}, nil, errRequeue // our entry is gone
		}
		// A later waiter: it waits for the entry just ahead, a waiter
		// too: the tail's at our join (the wait checks it is still there
		// from a.seen), or read at this read's revision.
		later := func(ahead []*mvccpb.KeyValue, _ bool) queue.Plan {
			l := a.listing(a.entries(ahead, false), false)
			l.Before = limit
			return queue.Decide(l)
		}
		if tailKnown {
			ahead = []*mvccpb.KeyValue{{Key: []byte(a.pred), CreateRevision: a.predRev}}
			return later(ahead, false), ahead, nil
		}
		p, ahead, err := a.scan(ctx, readRev, readRev, false, later)
		if !errors.Is(err, errCompacted) {
			return p, ahead, err
		}
		n = int64(limit+1+queueReadLimit) / 8 // compacted meanwhile: read again
	}
}

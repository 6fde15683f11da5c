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
// revision, and new ones go behind every existing one, so the entries
// ahead of ours only go, and an entry that the rule grants stays granted.
// A waiter reads the queue when it joins and when what it waits for
// changes, and queue.Decide plans its wait from the read: the one change
// that can grant it, so that a release wakes only the waiters it can make
// grantable, plus at most one that learns it is now a semaphore's first
// waiter.
//
//   - An Exclusive entry (a lock, a writer) waits for the entry just ahead
//     of it: the newest older key, keys only.
//   - A reader (Shared, no limit) waits for the nearest Exclusive entry
//     ahead of it: the newest keys with their values, in pages, until one
//     is found or the head is reached.
//   - A permit of a semaphore of N counts the oldest N+1 entries. The first
//     waiter (exactly N ahead, all holders) waits for any of them to go: a
//     watch of the directory, deletes only, filtered to those keys. A
//     later waiter waits for the entry just ahead of it, a waiter too, to
//     go or to be granted: a semaphore's waiter granted after waiting
//     writes to its own entry (touch), so that the one behind it learns
//     that it may now be the first waiter.
//
// A release marker (written by Exclusive holders only, see Release) in the
// revision of the delete of the entry waited for means that entry was an
// Exclusive holder: nothing was ahead of it, and only Shared entries are
// between it and a reader that waits for it (nothing, for an Exclusive
// waiter). Either is granted then, without a read
// (queue.Plan.ExclusiveRelease). etcd takes no other proof from an event:
// it reads again.

// queueReadLimit is how many keys a read of the queue returns at first: our
// entry, the one ahead of it, and room for release markers, which live from
// a release to the next holder's release.
const queueReadLimit = 8

// foreignLabel is the label of an entry whose header dlock cannot have
// written: no kind's, so that the planner counts it as Exclusive.
const foreignLabel = "?"

// errCompacted means that a read at a past revision found it compacted.
var errCompacted = errors.New("etcddlock: revision compacted")

// evaluate reads the queue at a revision not older than a.minRev and plans
// our wait (stepEvaluate).
func (a *attempt) evaluate(ctx context.Context) error {
	if a.rev == 0 {
		return errRequeue
	}
	atJoin := a.atJoin
	a.atJoin = false
	var (
		p     queue.Plan
		ahead []*mvccpb.KeyValue
		err   error
	)
	switch {
	case a.semaphore():
		// Its first count reads the queue as it was when our entry was
		// created. The waiter behind ours waits for our touch if it
		// counted us as a waiter; had we counted later, and been granted
		// by releases in between, we would not know that we ever waited,
		// and would not touch. Counted at our creation, "not granted" is
		// exactly "somebody may have seen us wait".
		at := int64(0)
		if atJoin {
			at = a.rev
		}
		p, ahead, err = a.evalPermit(ctx, atJoin && a.pred != "", at)
	default:
		values := a.req.Mode == driver.Shared // a reader needs the modes
		p, ahead, err = a.scan(ctx, a.minRev, 0, values, func(ahead []*mvccpb.KeyValue, all bool) queue.Plan {
			return queue.Decide(a.listing(a.entries(ahead, values), all))
		})
	}
	if err != nil {
		return err
	}
	return a.follow(p, ahead)
}

// follow sets what we wait for from p, a plan over the entries ahead.
func (a *attempt) follow(p queue.Plan, ahead []*mvccpb.KeyValue) error {
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
// semaphore's, all Shared of its label (see the kind check); else of
// unknown mode.
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

// getQueue reads the keys of the queue up to our entry with opts, at a
// revision not older than minRev: serializable (no leader round) when the
// member has applied minRev, after which entries older than ours can only
// have gone; else linearizable.
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

// scan reads the queue newest first from our entry, keys only or with
// their values, at revision at if not 0, in pages eightfold larger each
// time, until decide plans: decide gets the entries read ahead of ours,
// oldest first, and whether they are every entry ahead. It returns
// errRequeue if our entry is gone (expired, or deleted by hand).
func (a *attempt) scan(ctx context.Context, minRev, at int64, values bool, decide func(ahead []*mvccpb.KeyValue, all bool) queue.Plan) (queue.Plan, []*mvccpb.KeyValue, error) {
	for limit := int64(queueReadLimit); ; limit *= 8 {
		opts := []clientv3.OpOption{clientv3.WithLimit(limit), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)}
		if !values {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		if at != 0 {
			opts = append(opts, clientv3.WithRev(at))
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
// first, keys only, up to one more than the limit, at revision at if not 0.
// tailKnown says that a.pred is the entry the tail named at our join.
func (a *attempt) evalPermit(ctx context.Context, tailKnown bool, at int64) (queue.Plan, []*mvccpb.KeyValue, error) {
	limit := a.req.Limit
	for n := int64(limit + 1 + queueReadLimit); ; n *= 8 {
		opts := []clientv3.OpOption{clientv3.WithKeysOnly(), clientv3.WithLimit(n),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
		if at != 0 {
			opts = append(opts, clientv3.WithRev(at))
		}
		resp, err := a.getQueue(ctx, a.minRev, opts...)
		if errors.Is(err, errCompacted) {
			// Compacted already: count now, and touch when granted, as
			// if we had waited.
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
		// A later waiter: more than limit entries ahead, and the one just
		// ahead of ours waits too. The one the tail named at our join is
		// (nothing can come between), if it is still there, which the
		// wait checks from a.seen, the join's revision. Else read it at
		// this read's revision, where it is a waiter.
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

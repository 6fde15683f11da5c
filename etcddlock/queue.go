package etcddlock

import (
	"context"
	"errors"

	"github.com/dlockdev/dlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// The grant rule (driver.Admits) on etcd. Entries are ordered by create
// revision; new entries go behind every existing one, so the set of
// entries ahead of ours only shrinks, and an entry that the rule grants
// stays granted. A waiter evaluates the rule by reading the queue (below)
// when it joins and when what it waits for changes, and waits, between,
// for the one change that can grant it — herd-free: a release wakes only
// the waiters it can make grantable, plus at most one that learns it is
// now the first waiter of a semaphore.
//
//   - An Exclusive entry (a lock, a writer) is granted when nothing is
//     ahead: it waits for the entry just ahead of it to go.
//   - A reader (Shared, no limit) is granted when no Exclusive entry is
//     ahead: it waits for the nearest Exclusive entry ahead of it to go.
//     The readers behind one writer all wait for it, and its release
//     grants, and wakes, all of them at once.
//   - A permit of a semaphore of N (Shared) is granted when fewer than N
//     entries are ahead. The first waiter (exactly N ahead, all holders)
//     waits for any of those N to go: a watch of the directory, deletes
//     only, filtered to those keys. A later waiter waits for the entry just
//     ahead of it, a waiter too, to go or to be granted: a waiter of a
//     semaphore granted after waiting writes to its own entry (touch), so
//     that the one behind it learns that it may now be the first waiter.
//
// A release marker (written by Exclusive holders only, see Release) in the
// revision of the delete of the entry waited for means that entry was an
// Exclusive holder: nothing was ahead of it, and only Shared entries are
// between it and a reader that waits for it (or nothing, for an Exclusive
// waiter, which waits for the entry just ahead). Either is granted then,
// without a read. A Shared holder writes no marker: an Exclusive waiter
// behind readers reads the queue at each release until it is first.

// evaluate reads the queue at a revision not older than minRev and applies
// the grant rule to our entry: afterwards a.admitted, or a.pred or a.ahead
// say what to wait for. predKnown says that a.pred is the entry just ahead
// of ours, which existed at a.seen (the tail named it at our join). atJoin
// says that this is the evaluation that follows our join.
func (a *attempt) evaluate(ctx context.Context, minRev int64, predKnown, atJoin bool) error {
	a.ahead = nil
	switch {
	case a.req.Mode == driver.Exclusive:
		return a.findPred(ctx, minRev, 0)
	case a.semaphore():
		// A semaphore's first count reads the queue as it was when our
		// entry was created. The waiter behind ours waits for our touch
		// if it counted us as a waiter (queue.go); had we counted later,
		// and been granted by releases in between, we would not know
		// that we ever waited, and would not touch. Counted at our
		// creation, "not granted" is exactly "somebody may have seen
		// us wait".
		at := int64(0)
		if atJoin {
			at = a.rev
		}
		return a.evalPermit(ctx, minRev, predKnown, at)
	}
	return a.evalReader(ctx, minRev)
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

// errCompacted means that a read at a past revision found it compacted.
var errCompacted = errors.New("etcddlock: revision compacted")

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

// findPred reads the queue again, at a revision not older than minRev (or
// at revision at, if not 0), and records the entry just ahead of ours.
func (a *attempt) findPred(ctx context.Context, minRev, at int64) error {
	if a.rev == 0 {
		return errRequeue
	}
	for limit := int64(queueReadLimit); ; limit *= 8 {
		// Keys only: our entry and the newest one older than ours.
		opts := newestFirst(limit)
		if at != 0 {
			opts = append(opts, clientv3.WithRev(at))
		}
		resp, err := a.getQueue(ctx, minRev, opts...)
		if err != nil {
			return err
		}
		if err := a.ownEntryFirst(resp); err != nil {
			return err
		}
		kvs := resp.Kvs
		if at != 0 {
			a.seen = at
		}
		if a.pickPred(kvs[1:]) || !resp.More {
			return nil
		}
		// Only release markers among the newest keys: read further.
	}
}

// ownEntryFirst checks that a newest-first read of the queue starts with
// our entry, the one this attempt created, and records the read's revision
// as seen; errRequeue if our entry is gone (expired or deleted by hand).
func (a *attempt) ownEntryFirst(resp *clientv3.GetResponse) error {
	kvs := resp.Kvs
	if len(kvs) == 0 || string(kvs[0].Key) != a.key || kvs[0].CreateRevision != a.rev {
		return errRequeue // our entry is gone
	}
	a.seen = resp.Header.Revision
	return nil
}

// evalReader finds the nearest Exclusive entry ahead of a reader: it reads
// the queue newest first, with the values (the entries' modes), until it
// finds one. An entry of another kind, which only a hand-made change can
// put there, counts as Exclusive: a reader never shares with it.
func (a *attempt) evalReader(ctx context.Context, minRev int64) error {
	for limit := int64(queueReadLimit); ; limit *= 8 {
		resp, err := a.getQueue(ctx, minRev, clientv3.WithLimit(limit),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))
		if err != nil {
			return err
		}
		if err := a.ownEntryFirst(resp); err != nil {
			return err
		}
		kvs := resp.Kvs
		a.pred, a.predRev = "", 0
		for _, kv := range kvs[1:] {
			if !isEntry(a.dir, string(kv.Key)) {
				continue
			}
			if label, m, _ := parseEntry(kv.Value); m == driver.Exclusive || label != a.label {
				a.pred, a.predRev = string(kv.Key), kv.CreateRevision
				return nil
			}
		}
		if !resp.More {
			return nil // only readers ahead: granted
		}
	}
}

// evalPermit counts the entries ahead of a semaphore's waiter, oldest
// first, keys only, up to one more than the limit.
func (a *attempt) evalPermit(ctx context.Context, minRev int64, predKnown bool, at int64) error {
	limit := a.req.Limit
	pred, predRev := a.pred, a.predRev
	for n := int64(limit + 1 + queueReadLimit); ; n *= 8 {
		opts := []clientv3.OpOption{clientv3.WithKeysOnly(), clientv3.WithLimit(n),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
		if at != 0 {
			opts = append(opts, clientv3.WithRev(at))
		}
		resp, err := a.getQueue(ctx, minRev, opts...)
		if errors.Is(err, errCompacted) {
			// Compacted already: count now, and touch when granted, as
			// if we had waited.
			a.waited, at, n = true, 0, n/8
			continue
		}
		if err != nil {
			return err
		}
		readRev := resp.Header.Revision
		if at != 0 {
			readRev = at
		}
		var ahead []string
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
			if ahead = append(ahead, k); len(ahead) > limit {
				break
			}
		}
		if !found && len(ahead) <= limit {
			if resp.More {
				continue // markers among the oldest keys: read further
			}
			return errRequeue // our entry is gone
		}
		a.pred, a.predRev = "", 0
		switch {
		case found && len(ahead) < limit:
			a.seen = readRev
			return nil // granted
		case found:
			// The first waiter: the entries ahead are the limit's
			// holders.
			a.seen = readRev
			a.ahead = make(map[string]bool, len(ahead))
			for _, k := range ahead {
				a.ahead[k] = true
			}
			return nil
		}
		// A later waiter: the entry just ahead of ours waits too. The one
		// the tail named at our join is (nothing can come between), if it
		// is still there, which the wait checks from a.seen, the join's
		// revision. Else read it at this read's revision, where it is a
		// waiter.
		if predKnown {
			a.pred, a.predRev = pred, predRev
			return nil
		}
		err = a.findPred(ctx, readRev, readRev)
		if !errors.Is(err, errCompacted) {
			return err
		}
		n = int64(limit+1+queueReadLimit) / 8 // compacted meanwhile: read again
	}
}

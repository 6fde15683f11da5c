package etcddlock

import (
	"context"
	"fmt"
	"slices"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/driver/queue"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// try makes the one attempt of TryLock, TryAcquire and TryRLock
// (stepTry): granted only if the rule grants an entry at the queue's end.
func (a *attempt) try(ctx context.Context) error {
	r, err := a.enqueue(ctx, false)
	if err != nil || a.took(r) {
		return err
	}
	// Held, or waited for: the tail, or an entry, says the queue's kind.
	label, _, _, known := parseTail(r.tail.GetValue())
	if r.tail == nil || !known {
		kv := firstEntry(a.dir, r.newest)
		if kv == nil && a.req.Mode == driver.Exclusive {
			if kv, err = a.someEntry(ctx); err != nil {
				return err
			}
		}
		if kv != nil {
			label, _, _ = parseEntry(kv.Value)
			known = label != ""
		}
	}
	switch {
	case known && label != a.label:
		return a.kindErr(label)
	case a.req.Mode == driver.Shared:
		return a.tryShared(ctx)
	}
	return driver.ErrLocked // TryLock never barges ahead of waiters
}

// tryMaxRounds bounds the reads of tryShared when the queue changes under
// it: each round failed because another call created a key meanwhile.
const tryMaxRounds = 8

// tryShared tries a Shared entry at the end of a queue that is not empty:
// it reads the queue, applies the rule, and creates our entry if no key was
// created since the read. The entries are then a subset of those read, all
// of our kind, and the rule, more permissive as entries go, grants us.
func (a *attempt) tryShared(ctx context.Context) error {
	for range tryMaxRounds {
		// A semaphore needs limit entries to refuse us; a reader, the
		// whole queue (one writer anywhere refuses it).
		n := 0
		if a.semaphore() {
			n = a.req.Limit + queueReadLimit
		}
		kvs, rev, err := a.readOldest(ctx, n, a.req.Limit)
		if err != nil {
			return err
		}
		kvs = slices.DeleteFunc(kvs, func(kv *mvccpb.KeyValue) bool { return !isEntry(a.dir, string(kv.Key)) })
		l := a.listing(a.entries(kvs, true), true)
		l.OtherKind = queue.Refuse
		if p := queue.Decide(l); p.Verdict == queue.Mismatch {
			label, _, _ := parseEntry(kvs[p.Target].Value)
			return a.kindErr(label)
		} else if p.Verdict != queue.Granted {
			return driver.ErrLocked
		}
		r, err := a.commit(ctx, []clientv3.Cmp{a.absent(), clientv3.Compare(clientv3.CreateRevision(a.dir), "<", rev+1).WithPrefix()}, a.puts()...)
		if err != nil || a.took(r) {
			return err
		}
	}
	return fmt.Errorf("%w: the queue changed at each of %d tries", driver.ErrLocked, tryMaxRounds)
}

// took goes on from a try's Txn if it created our entry, or found it made
// by an earlier try whose reply was lost (a try creates its entry only
// where the rule grants it), and reports whether it did.
func (a *attempt) took(r txnReply) bool {
	if r.ours != nil {
		a.rev, a.seen = r.ours.CreateRevision, r.rev
	} else if !r.put {
		return false
	}
	a.granted()
	return true
}

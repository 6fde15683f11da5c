package etcddlock

import (
	"context"
	"fmt"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/driver/queue"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// tryMaxRounds bounds the rounds of a Shared try when the queue changes
// under it: each round failed because another call created a key meanwhile.
const tryMaxRounds = 8

// try makes the one attempt of TryLock, TryAcquire and TryRLock
// (stepTry): granted only if the rule grants an entry at the queue's end.
// A Shared try behind entries reads them, and creates our entry if no key
// was created since (docs/etcd.md, Kind): then the entries are a subset of
// those read, and the rule, more permissive as entries go, grants us.
func (a *attempt) try(ctx context.Context) error {
	r, done, err := a.takeFree(ctx)
	if done || err != nil {
		if err == nil {
			a.took(r)
		}
		return err
	}
	if r, err = a.enqueue(ctx, false); err != nil || a.took(r) {
		return err
	}
	a.d.busy.saw(a.dir) // held or waited for
	// Held, or waited for: the tail, or an entry, says the queue's kind.
	label, _, _, known := parseTail(r.tail.GetValue())
	if kv := firstEntry(a.dir, r.newest); r.tail == nil || !known {
		label, _, _ = parseEntry(kv.GetValue())
		known = kv != nil && label != ""
	}
	switch {
	case known && label != a.label:
		return driver.KindMismatch(label, a.req.Kind, a.req.Limit)
	case known && a.req.Mode == driver.Exclusive:
		return driver.ErrLocked // TryLock never barges ahead of waiters
	}
	a.minRev = r.rev // the read sees at least what the Txn saw
	for range tryMaxRounds {
		p, ahead, err := a.scan(ctx)
		if err == nil {
			var again bool
			if again, err = a.sitOut(ctx, ahead); again && err == nil {
				continue // lock-delays over, their records deleted: read again
			}
		}
		switch {
		case err != nil:
			return err
		case p.Verdict == queue.Mismatch:
			label, _, _ := parseEntry(ahead[p.Target].Value)
			return driver.KindMismatch(label, a.req.Kind, a.req.Limit)
		case p.Verdict != queue.Granted || a.req.Mode == driver.Exclusive:
			return driver.ErrLocked
		}
		// Txn: if no key was created in the queue since the read, the puts.
		r, err = a.commit(ctx, a.absent(prefixed(cmpCreate(a.dir, pb.Compare_LESS, a.seen+1))), a.puts()...)
		if err != nil || a.took(r) {
			return err
		}
		a.minRev = r.rev
	}
	return fmt.Errorf("%w: the queue changed at each of %d tries", driver.ErrLocked, tryMaxRounds)
}

// took goes on from a try's Txn if it created our entry, or found it made
// by an earlier try whose reply was lost (a try creates its entry only
// where the rule grants it), and reports whether it did.
func (a *attempt) took(r txnReply) bool {
	if !r.put && r.ours == nil {
		return false
	}
	a.granted()
	return true
}

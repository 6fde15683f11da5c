package etcddlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/driver/queue"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// absent compares what every write that creates our entry requires, with
// more: our entry does not exist (a retry after a lost reply finds it: its
// name is lent to this call alone), and the lease's guard is as we last saw
// it, so that a copy of the write that etcd applies after a fence creates
// nothing (etcdDriver.fence). commit sends again when only the guard
// differs.
func (a *attempt) absent(more ...*pb.Compare) []*pb.Compare {
	return append(append(make([]*pb.Compare, 0, 2+len(more)), cmpCreate(a.keyB, pb.Compare_EQUAL, 0), a.l.guardUnchanged()), more...)
}

// puts create our entry and the tail naming it, on our lease, and delete
// the marker of our name's last release.
func (a *attempt) puts() []*pb.RequestOp {
	return append(a.putAlone(), opPut(tailKey(a.dir), tailValue(a.label, a.req.Mode, a.key), a.l.id))
}

// putAlone creates our entry, on our lease, without a tail, and deletes
// the marker of our name's last release: the write into an empty queue,
// where a lone holder is one etcd key (docs/etcd.md, Keys). The first
// joiner behind it finds no tail and queues behind it (behind).
func (a *attempt) putAlone() []*pb.RequestOp {
	ops := append([]*pb.RequestOp{opPut(a.keyB, entryValue(a.label, a.req.Mode, a.req.Metadata), a.l.id)}, a.putDelay()...)
	return append(ops, a.slot.dropMarker()...)
}

// enqueue sends the Txn of a join (behindTail) or a try, which compares a
// witness of the queue's kind (docs/etcd.md, Kind): behind a tail of our
// kind (a join only); else into an empty queue; else it reads the tail, or
// without one, a join puts behind entries all of our kind (no marker among
// them), and otherwise reads the queue's newest keys.
func (a *attempt) enqueue(ctx context.Context, behindTail bool) (txnReply, error) {
	tail := tailKey(a.dir)
	// Read the tail: the newest entry and its kind.
	readTail := opGet(tail)
	// Read the newest keys of the queue, with their kinds.
	readNewest := opNewest(a.dir, queueReadLimit)
	// There is a tail, whatever it carries.
	tailExists := cmpCreate(tail, pb.Compare_GREATER, 0)
	// The queue has no key, or only markers (empty values; etcd fails a
	// value comparison over no keys, hence two steps).
	noKey := prefixed(cmpCreate(a.dir, pb.Compare_EQUAL, 0))
	onlyMarkers := prefixed(cmpValue(a.dir, pb.Compare_EQUAL, ""))
	// Into an empty queue, our entry alone: no tail (the queue's only
	// entry is also its newest). The same operations may appear in several
	// branches: etcd's messages are values, so they are encoded once per
	// branch.
	alone := a.putAlone()
	noTail := []*pb.RequestOp{readNewest}
	if behindTail {
		// Every key of the queue is an entry of our label: no marker (an
		// empty value), no other kind. Then the puts, and a read of the
		// two newest entries, ours and the one just ahead.
		lo, hi := entryBounds(a.label)
		ours := []*pb.Compare{prefixed(cmpValue(a.dir, pb.Compare_GREATER, lo))}
		if hi != "" {
			ours = append(ours, prefixed(cmpValue(a.dir, pb.Compare_LESS, hi)))
		}
		noTail = []*pb.RequestOp{opTxn(ours, append(a.puts(), opNewest(a.dir, 2)), noTail)}
	}
	then := []*pb.RequestOp{opTxn([]*pb.Compare{noKey}, alone, []*pb.RequestOp{opTxn([]*pb.Compare{onlyMarkers}, alone,
		[]*pb.RequestOp{opTxn([]*pb.Compare{tailExists}, []*pb.RequestOp{readTail}, noTail)})})}
	if behindTail {
		// The tail carries our label (etcd compares values byte-wise).
		lo, hi := tailBounds(a.label, a.dir)
		ours := []*pb.Compare{cmpValue(tail, pb.Compare_GREATER, lo), cmpValue(tail, pb.Compare_LESS, hi)}
		then = []*pb.RequestOp{opTxn(ours, append([]*pb.RequestOp{readTail}, a.puts()...), then)}
	}
	return a.commit(ctx, a.absent(), then...)
}

// takeFree sends the small Txn of a join or try of a key that this Client
// did not see busy lately, nor sends it for now (busy.go): if the guard is
// as last seen and the queue has no key, our entry alone; else nothing,
// not even a read, to keep the request small. It reports whether it
// created our entry; else the full Txn follows, which finds our entry if
// an earlier request of this call created it (its reply lost) and handles
// a moved guard; a queue that was not empty marks the key busy.
func (a *attempt) takeFree(ctx context.Context) (txnReply, bool, error) {
	if !a.d.busy.claim(a.dir) {
		return txnReply{}, false, nil
	}
	defer a.d.busy.unclaim(a.dir)
	// The queue has no key: not even a release marker (a queue of markers
	// alone takes the full Txn), nor our entry, which is in it: absent's
	// comparison of our entry would only make the request larger, and
	// etcd keeps every request in memory until its next snapshot.
	noKey := prefixed(cmpCreate(a.dir, pb.Compare_EQUAL, 0))
	r, err := a.commitElse(ctx, false, []*pb.Compare{a.l.guardUnchanged(), noKey}, a.putAlone()...)
	if err != nil || r.put {
		a.alone = r.put
		return r, true, err
	}
	return txnReply{}, false, nil
}

// txnReply is the reply of a Txn on our entry, decoded once.
type txnReply struct {
	rev    int64
	ours   *mvccpb.KeyValue   // our entry, read when the comparisons failed
	put    bool               // the Txn wrote our entry: created it
	tail   *mvccpb.KeyValue   // the tail it read, if any
	newest []*mvccpb.KeyValue // the newest keys of the queue, if it read them
	// unchanged: the comparison of a nested Txn with no operations (a
	// check, behind's) held.
	unchanged bool
}

// guardMoves bounds the rounds of a commit whose comparison of the guard
// failed: each round follows a fence by another call of the lease.
const guardMoves = 16

// commit sends If(cmps) Then(then) Else(read our entry, and the guard) and
// decodes the reply. An unknown outcome before our entry exists marks the
// attempt dirty. When cmps compare the guard (absent) and only that failed,
// it sends again with the guard as read.
func (a *attempt) commit(ctx context.Context, cmps []*pb.Compare, then ...*pb.RequestOp) (txnReply, error) {
	return a.commitElse(ctx, true, cmps, then...)
}

// commitElse is commit, with an empty Else unless readBack: a failed Txn
// then says nothing of why (takeFree's, which the full join follows, and
// the full join reads our entry and the guard).
func (a *attempt) commitElse(ctx context.Context, readBack bool, cmps []*pb.Compare, then ...*pb.RequestOp) (txnReply, error) {
	var resp *pb.TxnResponse
	guard, els := -1, []*pb.RequestOp(nil)
	if readBack {
		guard = slices.IndexFunc(cmps, func(c *pb.Compare) bool { return string(c.Key) == a.l.guard })
		els = []*pb.RequestOp{opGet(a.keyB)}
		if guard >= 0 {
			els = append(els, a.l.readGuard)
		}
	}
	var err error
	for round := 0; ; round++ {
		err = retry(ctx, func(ctx context.Context) (err error) {
			resp, err = a.d.txn(ctx, cmps, then, els)
			if err != nil && !rejected(err) && a.rev == 0 {
				a.dirty = true
			}
			return err
		})
		if err != nil || resp.Succeeded || guard < 0 || len(resp.Responses[0].GetResponseRange().Kvs) != 0 {
			break
		}
		var rev int64
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
			rev = kvs[0].ModRevision
		}
		if rev == cmps[guard].GetModRevision() {
			break // the guard as compared: another comparison failed
		}
		// Fenced by another call of the lease: nothing was created.
		a.l.sawGuard(rev)
		if round == guardMoves {
			err = fmt.Errorf("%w: its etcd lease was fenced %d times during one request", driver.ErrUnavailable, round)
			break
		}
		// As read, not as last seen: a guard gone (0) went with the
		// lease, and the puts then find the lease gone (loseLease).
		cmps[guard] = cmpMod(a.l.guard, pb.Compare_EQUAL, rev)
	}
	if isLeaseNotFound(err) {
		return txnReply{}, a.loseLease() // it expired between taking and using it
	}
	if err != nil {
		what := "queue"
		if !a.req.Wait {
			what = "take the lock"
		}
		return txnReply{}, a.d.wrapErr(what, err)
	}
	r := txnReply{rev: resp.Header.Revision}
	if resp.Succeeded {
		r.decode(resp.Responses, a.dir)
	} else if kvs := resp.Responses; readBack && len(kvs[0].GetResponseRange().Kvs) == 1 {
		r.ours = kvs[0].GetResponseRange().Kvs[0]
	}
	switch {
	case a.rev != 0:
	case r.put:
		a.rev, a.seen = r.rev, r.rev
		a.slot.marker = nil // the puts deleted it
	case r.ours != nil: // made by an earlier Txn whose reply was lost
		a.rev, a.seen, a.lostCreate = r.ours.CreateRevision, r.rev, true
	}
	return r, nil
}

// decode walks the branches the Txn took: a put is of our entry; a read of
// the tail key is the tail, any other read the queue's newest keys.
func (r *txnReply) decode(ops []*pb.ResponseOp, dir string) {
	for _, op := range ops {
		switch {
		case op.GetResponsePut() != nil:
			r.put = true
		case op.GetResponseTxn() != nil && len(op.GetResponseTxn().Responses) == 0:
			r.unchanged = op.GetResponseTxn().Succeeded
		case op.GetResponseTxn() != nil:
			r.decode(op.GetResponseTxn().Responses, dir)
		case op.GetResponseRange() != nil:
			kvs := op.GetResponseRange().Kvs
			if len(kvs) == 1 && isTail(dir, kvs[0].Key) {
				r.tail = kvs[0]
			} else {
				r.newest = kvs
			}
		}
	}
}

// join puts our entry at the end of the queue (stepJoin): behind a tail of
// our kind with one key read, not a sorted read of the queue, which would
// cost etcd a walk of every entry at every join (docs/etcd.md, Lock 2).
func (a *attempt) join(ctx context.Context) error {
	r, done, err := a.takeFree(ctx)
	if !done && err == nil {
		r, err = a.enqueue(ctx, true)
		if err == nil && !(r.put && r.tail == nil && r.newest == nil) {
			a.d.busy.saw(a.dir) // not into an empty queue: held or waited for
		}
	}
	switch {
	case err != nil:
		return err
	case r.put && r.tail == nil && len(r.newest) != 0 && a.delayRecord() != "":
		// Our delay record, at our create revision, may be among the
		// two newest keys read: read the queue instead.
		a.minRev, a.step = r.rev, stepEvaluate
		return nil
	case r.put && r.tail == nil && len(r.newest) == 2 && string(r.newest[0].Key) == a.key:
		// Queued behind entries of our kind with no tail (a lone holder):
		// the newest before ours is just ahead.
		label, mode, _ := parseEntry(r.newest[1].Value)
		a.queuedBehind(r.rev, r.newest[1], label, mode)
		return nil
	case r.put && r.tail == nil:
		a.granted() // queued into an empty queue: the oldest entry
		return nil
	case !r.put && r.ours == nil:
		if label, _, _, ok := parseTail(r.tail.GetValue()); r.tail != nil && ok && label != a.label {
			return driver.KindMismatch(label, a.req.Kind, a.req.Limit)
		}
		// No tail, or one dlock did not write: go by the entries.
		a.witness, a.minRev, a.step = firstEntry(a.dir, r.newest), r.rev, stepBehind
		return nil
	}
	// Queued behind the tail, or found after a lost reply (no tail read).
	// The tail names the newest entry, created at its mod revision
	// (docs/etcd.md, Keys; check catches a hand-made change).
	label, mode, entry, _ := parseTail(r.tail.GetValue())
	a.minRev, a.step = r.rev, stepEvaluate
	if !isEntry(a.dir, entry) || entry == a.key {
		return nil // none, not an entry's key, or ours (a tail left by a hand-made change)
	}
	a.queuedBehind(r.rev, &mvccpb.KeyValue{Key: []byte(entry), CreateRevision: r.tail.ModRevision}, label, mode)
	return nil
}

// queuedBehind plans the wait of an entry just created, at revision rev,
// behind pred, known without a read of the queue to be the newest entry
// ahead of it: a lock, a writer, or a reader behind a writer waits for it
// with no read; a permit counts (evaluate).
func (a *attempt) queuedBehind(rev int64, pred *mvccpb.KeyValue, label string, mode driver.Mode) {
	a.minRev, a.step = rev, stepEvaluate
	a.pred, a.predRev = string(pred.Key), pred.CreateRevision
	if p := queue.Decide(a.listing([]queue.Entry{{Mode: mode, Label: cmp.Or(label, foreignLabel)}}, false)); p.Verdict == queue.WaitFor {
		a.proof, a.step = p.ExclusiveRelease, stepWait
	}
}

// behind queues behind entries that have no tail (stepBehind): a lone
// holder's, or those of a queue whose newest waiter left. It creates our
// entry and the tail if an entry that the join read, or a read finds,
// still exists (the kind's witness); it joins again when only markers are
// left. If no key was created in the queue since that read, the witness,
// then the newest entry, is just ahead of ours, as the tail's entry is at a
// join, and the wait is planned from it without reading the queue.
func (a *attempt) behind(ctx context.Context) error {
	w, readAt := a.witness, a.minRev
	a.witness = nil
	if w == nil {
		p, ahead, err := a.scan(ctx)
		switch {
		case err != nil:
			return err
		case p.Verdict == queue.Mismatch:
			w = ahead[p.Target]
		case len(ahead) == 0:
			a.step = stepJoin
			return nil
		default:
			w = ahead[len(ahead)-1]
		}
		readAt = a.seen
	}
	label, mode, _ := parseEntry(w.Value)
	_, rmode, _, record := parseDelay(a.dir, string(w.Key))
	if record {
		// An ended entry's delay record (lockdelay.go): its label is
		// in its value.
		label, _ = parseDelayValue(w.Value)
		mode = rmode
	}
	if label != a.label {
		return driver.KindMismatch(label, a.req.Kind, a.req.Limit)
	}
	// Txn: if our entry does not exist and the witness does: a check that
	// no key was created in the queue since the read (a nested Txn with no
	// operations: txnReply.unchanged), and the puts.
	unchanged := opTxn([]*pb.Compare{prefixed(cmpCreate(a.dir, pb.Compare_LESS, readAt+1))}, nil, nil)
	r, err := a.commit(ctx, a.absent(cmpCreate(string(w.Key), pb.Compare_EQUAL, w.CreateRevision)), append([]*pb.RequestOp{unchanged}, a.puts()...)...)
	switch {
	case err != nil:
		return err
	case r.put && record:
		// Behind an ended entry: the read plans the wait, with its delay.
		a.minRev, a.step = r.rev, stepEvaluate
	case r.put && r.unchanged:
		// Entries only went since the read: the witness is the newest
		// one ahead of ours.
		a.queuedBehind(r.rev, w, label, mode)
	case r.put || r.ours != nil:
		a.minRev, a.step = r.rev, stepEvaluate
	default:
		a.minRev = r.rev // the witness went
	}
	return nil
}

// firstEntry returns the first entry among kvs, or nil if there is none.
func firstEntry(dir string, kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if i := slices.IndexFunc(kvs, func(kv *mvccpb.KeyValue) bool { return isEntry(dir, string(kv.Key)) }); i >= 0 {
		return kvs[i]
	}
	return nil
}

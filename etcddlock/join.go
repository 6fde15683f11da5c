package etcddlock

import (
	"context"
	"slices"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/driver/queue"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// absent: our entry does not exist (a retry after a lost reply finds it:
// its name is our lease's id, and the lease is ours alone).
func (a *attempt) absent() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0)
}

// puts create our entry and the tail naming it, on our lease, and delete
// the marker of our lease's last release.
func (a *attempt) puts() []clientv3.Op {
	return append([]clientv3.Op{
		clientv3.OpPut(a.key, entryValue(a.label, a.req.Mode, a.req.Metadata), clientv3.WithLease(a.l.id)),
		clientv3.OpPut(tailKey(a.dir), tailValue(a.label, a.req.Mode, a.key), clientv3.WithLease(a.l.id)),
	}, a.l.dropMarker()...)
}

// enqueue sends the Txn of a join (behindTail) or a try, which compares a
// witness of the queue's kind (docs/etcd.md, Kind): behind a tail of our
// kind (a join only); else into an empty queue; else it reads the tail, or
// without one the queue's newest keys.
func (a *attempt) enqueue(ctx context.Context, behindTail bool) (txnReply, error) {
	tail := tailKey(a.dir)
	// Read the tail: the newest entry and its kind.
	readTail := clientv3.OpGet(tail)
	// Read the newest keys of the queue, with their kinds.
	readNewest := clientv3.OpGet(a.dir, clientv3.WithPrefix(), clientv3.WithLimit(queueReadLimit),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))
	// There is a tail, whatever it carries.
	tailExists := clientv3.Compare(clientv3.CreateRevision(tail), ">", 0)
	// The queue has no key, or only markers (empty values; etcd fails a
	// value comparison over no keys, hence two steps).
	noKey := clientv3.Compare(clientv3.CreateRevision(a.dir), "=", 0).WithPrefix()
	onlyMarkers := clientv3.Compare(clientv3.Value(a.dir), "=", "").WithPrefix()
	puts := a.puts()
	then := []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{noKey}, puts, []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{onlyMarkers}, puts,
		[]clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{tailExists}, []clientv3.Op{readTail}, []clientv3.Op{readNewest})})})}
	if behindTail {
		// The tail carries our label (etcd compares values byte-wise).
		lo, hi := tailBounds(a.label, a.dir)
		ours := []clientv3.Cmp{clientv3.Compare(clientv3.Value(tail), ">", lo), clientv3.Compare(clientv3.Value(tail), "<", hi)}
		then = []clientv3.Op{clientv3.OpTxn(ours, append([]clientv3.Op{readTail}, puts...), then)}
	}
	return a.commit(ctx, []clientv3.Cmp{a.absent()}, then...)
}

// txnReply is the reply of a Txn on our entry, decoded once.
type txnReply struct {
	rev    int64
	ours   *mvccpb.KeyValue   // our entry, read when the comparisons failed
	put    bool               // the Txn wrote our entry: created it, or touched it
	tail   *mvccpb.KeyValue   // the tail it read, if any
	newest []*mvccpb.KeyValue // the newest keys of the queue, if it read them
}

// commit sends If(cmps) Then(then) Else(read our entry) and decodes the
// reply. An unknown outcome before our entry exists marks the attempt dirty.
func (a *attempt) commit(ctx context.Context, cmps []clientv3.Cmp, then ...clientv3.Op) (txnReply, error) {
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		resp, err = a.d.kv.Txn(ctx).If(cmps...).Then(then...).Else(clientv3.OpGet(a.key)).Commit()
		if err != nil && !rejected(err) && a.rev == 0 {
			a.dirty = true
		}
		return err
	})
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
		r.decode(resp.Responses, tailKey(a.dir))
	} else if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		r.ours = kvs[0]
	}
	switch {
	case a.rev != 0:
	case r.put:
		a.rev, a.seen = r.rev, r.rev
		a.l.marker = "" // the puts deleted it
	case r.ours != nil: // made by an earlier Txn whose reply was lost
		a.rev, a.seen, a.lostCreate = r.ours.CreateRevision, r.rev, true
	}
	return r, nil
}

// decode walks the branches the Txn took: a put is of our entry; a read of
// the tail key is the tail, any other read the queue's newest keys.
func (r *txnReply) decode(ops []*etcdserverpb.ResponseOp, tail string) {
	for _, op := range ops {
		switch {
		case op.GetResponsePut() != nil:
			r.put = true
		case op.GetResponseTxn() != nil:
			r.decode(op.GetResponseTxn().Responses, tail)
		case op.GetResponseRange() != nil:
			kvs := op.GetResponseRange().Kvs
			if len(kvs) == 1 && string(kvs[0].Key) == tail {
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
	r, err := a.enqueue(ctx, true)
	switch {
	case err != nil:
		return err
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
	// The tail's entry is just ahead: a lock, a writer, or a reader behind
	// a writer waits for it with no read; a permit counts (evaluate).
	a.pred, a.predRev = entry, r.tail.ModRevision
	if p := queue.Decide(a.listing([]queue.Entry{{Mode: mode, Label: label}}, false)); p.Verdict == queue.WaitFor {
		a.proof, a.step = p.ExclusiveRelease, stepWait
	}
	return nil
}

// behind queues behind entries that have no tail (stepBehind), if an entry
// that the join read, or a read finds, still exists (the kind's witness);
// it joins again when only markers are left.
func (a *attempt) behind(ctx context.Context) error {
	w := a.witness
	a.witness = nil
	if w == nil {
		p, ahead, err := a.scan(ctx, 0)
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
	}
	if label, _, _ := parseEntry(w.Value); label != a.label {
		return driver.KindMismatch(label, a.req.Kind, a.req.Limit)
	}
	r, err := a.commit(ctx, []clientv3.Cmp{a.absent(), clientv3.Compare(clientv3.CreateRevision(string(w.Key)), "=", w.CreateRevision)}, a.puts()...)
	switch {
	case err != nil:
		return err
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

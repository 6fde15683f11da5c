package etcddlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errRequeue means that the call lost its place in the queue: its lease
// expired while it could not renew it, or somebody deleted its entry. It
// queues again, at the end.
var errRequeue = errors.New("etcddlock: place in the queue lost")

// errWatch means that a watch ended by itself (no leader, stream broken):
// look at the queue again after a pause.
var errWatch = errors.New("etcddlock: watch ended")

// Acquire takes req.Key: see driver.Driver.
func (d *etcdDriver) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.inflight.Done()
	// Close interrupts a waiting call.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.ctx, cancel)
	defer stop()

	dir := d.queueDir(req.Key)
	a := &attempt{d: d, req: req, dir: dir, secs: seconds(req.TTL), label: driver.KindLabel(req.Kind, req.Limit)}
	g, err := a.run(ctx)
	if err != nil {
		a.abandon(ctx)
		return nil, cancelledErr(ctx, err)
	}
	return g, nil
}

// cancelledErr returns the error of a call that failed with err: ctx's own
// error if ctx was cancelled (by the caller, or by Client.Close) and err is
// only that cancellation, wrapped on its way up. A call cancelled while it
// waits for a watch event returns context.Canceled; one cancelled during a
// read of the queue got it wrapped as "etcd at ADDR: read the queue:
// context canceled". Which of the two a user saw depended on where the
// call was when the cancellation landed, and the step names a request
// that failed because it was cancelled, not because of etcd: the user
// sees one error for one cause. An error that carries an etcd failure
// (retry's "last etcd error", a refused request) is kept whole, and so is
// a deadline's: the step in flight when it expired says what was slow.
func cancelledErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if !errors.Is(cerr, context.Canceled) {
		return err
	}
	// The chain of single wraps (errors.Unwrap) ends at the cancellation
	// itself only if nothing else was joined in.
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e == cerr {
			return cerr
		}
	}
	return err
}

// attempt is one Acquire call.
type attempt struct {
	d     *etcdDriver
	req   *driver.AcquireRequest
	dir   string // the lock's queue directory
	secs  int64  // TTL in whole seconds
	label string // driver.KindLabel of the request: what every entry of the queue must be

	l     *etcdLease // nil until taken, and after it was given up
	key   string     // our entry: dir + the lease's id
	rev   int64      // create revision of our entry once created: the fencing token
	dirty bool       // a request that may have created our entry failed: its outcome is unknown

	// What we wait for (see queue.go): an entry older than ours (pred),
	// or, for a semaphore's first waiter, every entry ahead (ahead).
	pred     string          // its etcd key; "" when we wait for no single entry
	predRev  int64           // its create revision (and mod revision: see predChanged)
	ahead    map[string]bool // the entries ahead of a semaphore's first waiter; nil otherwise
	seen     int64           // a revision at which what we wait for and our entry both existed
	lastPred string          // the last entry we waited for: its release marker is ours to delete
	lostJoin bool            // our join's reply was lost: we may not know what we waited for
	waited   bool            // the grant rule refused us at least once
	// byRead: the wait ended with a read of the queue, not a release
	// marker. A marker may then have been written for us unseen (see
	// grant.strays).
	byRead bool
}

// admitted reports whether the grant rule grants our entry, as last
// evaluated: we wait for nothing.
func (a *attempt) admitted() bool { return a.pred == "" && a.ahead == nil }

// semaphore reports whether the call is a semaphore's: the one kind whose
// waiters count the entries ahead rather than wait for one.
func (a *attempt) semaphore() bool { return a.req.Kind == driver.KindSemaphore }

func (a *attempt) run(ctx context.Context) (*grant, error) {
	var b backoff
	for {
		if a.l == nil {
			l, err := a.d.takeLease(ctx, a.secs)
			if err != nil {
				return nil, err
			}
			a.l, a.key = l, entryKey(a.dir, l.id)
		}
		var err error
		if a.req.Wait {
			if err = a.join(ctx); err == nil {
				err = a.wait(ctx)
			}
		} else {
			err = a.try(ctx)
		}
		if err == nil {
			err = a.freshen(ctx)
		}
		if err == nil {
			return a.grant(ctx), nil
		}
		if !errors.Is(err, errRequeue) {
			return nil, err
		}
		a.rev, a.pred, a.ahead, a.lastPred, a.lostJoin, a.waited, a.byRead = 0, "", nil, "", false, false, false
		if err := b.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// puts are the operations that create our entry at the end of the queue:
// the entry and the tail naming it, on our lease, and the delete of the
// marker of our lease's last release, if any.
func (a *attempt) puts() []clientv3.Op {
	return append([]clientv3.Op{
		clientv3.OpPut(a.key, entryValue(a.label, a.req.Mode, a.req.Metadata), clientv3.WithLease(a.l.id)),
		clientv3.OpPut(tailKey(a.dir), tailValue(a.label, a.req.Mode, a.key), clientv3.WithLease(a.l.id)),
	}, a.l.dropMarker()...)
}

// The kind check. Every write that creates an entry (a join, a try) is a
// Txn guarded by a witness of the queue's kind, compared in that same Txn:
// the queue is empty (markers aside), or the tail, which names the newest
// entry and carries its label, carries ours (tailBounds), or an entry read
// just before, of our label, still exists (joinBehind), or no key was
// created since a read that showed only entries of our label (tryShared).
// So, by induction over the writes, all entries of a queue have one label
// at every revision: two calls of different kinds that join at once are
// serialized by etcd, and the second one's witness fails. A call whose
// witness shows another label writes nothing and fails with KindMismatch.
// Only a hand-made change breaks the induction; an entry whose header
// dlock cannot have written counts as Exclusive (parseEntry), so that a
// reader never shares with it.

// kindErr returns the error for a queue whose entries are of label.
func (a *attempt) kindErr(label string) error {
	return driver.KindMismatch(label, a.req.Kind, a.req.Limit)
}

// try makes the one attempt of TryLock, TryAcquire and TryRLock: granted
// only if the grant rule grants an entry at the end of the current queue.
func (a *attempt) try(ctx context.Context) error {
	take := a.puts()
	tail := tailKey(a.dir)
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Txn: if our entry does not exist, create it (and make the tail
		// name it) only if the queue is empty: no holder and no waiter.
		// Empty means no key in the directory, or only release markers
		// (empty values; etcd fails a value comparison over no keys,
		// hence two steps). Else read the tail, whose label says the
		// queue's kind. If our entry exists, read it: an earlier try of
		// this call created it and its reply was lost (its name is our
		// lease's id, and the lease is ours alone); a try creates its
		// entry only where the rule grants it.
		resp, err = a.d.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0)).
			Then(clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(a.dir), "=", 0).WithPrefix()},
				take,
				[]clientv3.Op{clientv3.OpTxn(
					[]clientv3.Cmp{clientv3.Compare(clientv3.Value(a.dir), "=", "").WithPrefix()},
					take, []clientv3.Op{clientv3.OpGet(tail)})})).
			Else(clientv3.OpGet(a.key)).
			Commit()
		if err != nil && !rejected(err) {
			// Unknown outcome: the Put may yet be applied.
			a.dirty = true
		}
		return err
	})
	if err != nil {
		return a.txnErr("take the lock", err)
	}
	if !resp.Succeeded {
		// Created by this call: granted then.
		a.rev, a.seen = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision, resp.Header.Revision
		return nil
	}
	in := resp.Responses[0].GetResponseTxn()
	if in.Succeeded || in.Responses[0].GetResponseTxn().Succeeded {
		a.created(resp.Header.Revision)
		return nil
	}
	// Held, or waited for. Another kind's queue refuses us; an Exclusive
	// entry is never granted behind anybody (a fair lock never lets
	// TryLock barge); a Shared one may be.
	byTail := false
	if kvs := in.Responses[0].GetResponseTxn().Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		label, _, _, ok := parseTail(kvs[0].Value)
		if ok && label != a.label {
			return a.kindErr(label)
		}
		byTail = ok
	}
	if a.req.Mode == driver.Exclusive {
		if !byTail {
			// Without a tail (its newest entry gave up), an entry says
			// the queue's kind.
			label, _, err := a.someEntry(ctx)
			if err != nil {
				return err
			}
			if label != "" && label != a.label {
				return a.kindErr(label)
			}
		}
		return driver.ErrLocked
	}
	return a.tryShared(ctx)
}

// tryMaxRounds bounds the reads of tryShared when the queue changes under
// it: each round failed because another call created a key meanwhile.
const tryMaxRounds = 8

// tryShared tries a Shared entry at the end of a queue that is not empty:
// it reads the queue, applies the grant rule, and creates our entry in a
// Txn that fails if any key was created in the directory since the read.
// The entries then are a subset of those read: the rule, which only gets
// more permissive as entries go, still grants us, and they are all of our
// kind (see the kind check above).
func (a *attempt) tryShared(ctx context.Context) error {
	for range tryMaxRounds {
		// A semaphore needs limit entries to refuse us; a reader, the
		// whole queue (one writer anywhere refuses it).
		n := 0
		if a.semaphore() {
			n = a.req.Limit + queueReadLimit
		}
		kvs, rev, err := a.readQueue(ctx, 0, int64(n))
		if err != nil {
			return err
		}
		if n > 0 && len(kvs) == n && countEntries(a.dir, kvs) < a.req.Limit {
			// Markers among the oldest keys: count them all.
			if kvs, rev, err = a.readQueue(ctx, 0, 0); err != nil {
				return err
			}
		}
		shared, exclusive := 0, 0
		for _, kv := range kvs {
			if !isEntry(a.dir, string(kv.Key)) {
				continue
			}
			label, m, _ := parseEntry(kv.Value)
			if label != a.label {
				return a.kindErr(label)
			}
			if m == driver.Shared {
				shared++
			} else {
				exclusive++
			}
		}
		if !driver.Admits(a.req.Limit, driver.Shared, shared, exclusive) {
			return driver.ErrLocked
		}
		// Unless our entry exists (a retry after a lost reply), create it
		// if no key was created in the directory since the read.
		resp, err := a.createIf(ctx, clientv3.Compare(clientv3.CreateRevision(a.dir), "<", rev+1).WithPrefix())
		if err != nil {
			return a.txnErr("take the lock", err)
		}
		if resp.Succeeded {
			a.created(resp.Header.Revision)
			return nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			a.rev, a.seen = kvs[0].CreateRevision, resp.Header.Revision
			return nil // created by the try whose reply was lost
		}
	}
	return fmt.Errorf("%w: the queue changed at each of %d tries", driver.ErrLocked, tryMaxRounds)
}

// readQueue reads the queue's keys with their values, oldest first, up to
// limit keys (0: all), at a revision not older than minRev, and returns
// them with that revision.
func (a *attempt) readQueue(ctx context.Context, minRev, limit int64) ([]*mvccpb.KeyValue, int64, error) {
	var resp *clientv3.GetResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Range over the queue with the values (headers, metadata),
		// oldest first: serializable if the member has applied minRev.
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(limit),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
		if minRev > 0 {
			resp, err = a.d.kv.Get(ctx, a.dir, append(opts, clientv3.WithSerializable())...)
			if err != nil || resp.Header.Revision >= minRev {
				return err
			}
		}
		resp, err = a.d.kv.Get(ctx, a.dir, opts...)
		return err
	})
	if err != nil {
		return nil, 0, a.d.wrapErr("read the queue", err)
	}
	return resp.Kvs, resp.Header.Revision, nil
}

// countEntries returns how many of kvs are entries, not markers.
func countEntries(dir string, kvs []*mvccpb.KeyValue) int {
	n := 0
	for _, kv := range kvs {
		if isEntry(dir, string(kv.Key)) {
			n++
		}
	}
	return n
}

// firstLabel returns the label and the key-value of the first entry among
// kvs, or "" and nil if there is none.
func firstLabel(dir string, kvs []*mvccpb.KeyValue) (string, *mvccpb.KeyValue) {
	for _, kv := range kvs {
		if isEntry(dir, string(kv.Key)) {
			label, _, _ := parseEntry(kv.Value)
			return label, kv
		}
	}
	return "", nil
}

// someEntry returns the oldest entry of the queue and its label, or nil
// if the queue has none (markers aside).
func (a *attempt) someEntry(ctx context.Context) (string, *mvccpb.KeyValue, error) {
	kvs, _, err := a.readQueue(ctx, 0, queueReadLimit)
	if err != nil {
		return "", nil, err
	}
	if label, kv := firstLabel(a.dir, kvs); kv != nil || len(kvs) < queueReadLimit {
		return label, kv, nil
	}
	// Only markers among the oldest keys: read them all.
	if kvs, _, err = a.readQueue(ctx, 0, 0); err != nil {
		return "", nil, err
	}
	label, kv := firstLabel(a.dir, kvs)
	return label, kv, nil
}

// queueReadLimit is how many keys a read of the queue returns at first: our
// entry, the one ahead of it, and room for release markers, which live from
// a release to the next holder's release.
const queueReadLimit = 8

// newestFirst are the options of a read of a queue's newest keys, keys only.
func newestFirst(limit int64) []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(limit)}
}

// join puts our entry at the end of the queue and finds what to wait for.
func (a *attempt) join(ctx context.Context) error {
	tail := tailKey(a.dir)
	lo, hi := tailBounds(a.label, a.dir)
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// Txn: unless our entry exists, check the queue's kind and find
		// the entry ahead of ours, then create ours and make the tail
		// name it. A retry after a lost reply finds our entry instead of
		// queueing twice: its name is our lease's id, and the lease is
		// ours alone.
		//
		// The tail names the newest entry and carries its kind: if its
		// kind is ours, read it (before our writes) and queue. One key:
		// a sorted read of the queue would cost etcd's apply loop a walk
		// of every entry at every join — quadratic in a burst of
		// waiters, and etcd refuses writes ("too many requests") while
		// its apply lags. A tail of another kind: read it, and write
		// nothing (KindMismatch). Without a tail, queue if the queue is
		// empty (markers aside, as in try); else (the newest entry left
		// with others before it: the newest waiter gave up) read the
		// newest keys of the queue, with their kinds, and write nothing
		// yet (joinBehind).
		puts := a.puts()
		empty := clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(a.dir), "=", 0).WithPrefix()},
			puts,
			[]clientv3.Op{clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(a.dir), "=", "").WithPrefix()},
				puts,
				[]clientv3.Op{clientv3.OpGet(a.dir, clientv3.WithPrefix(), clientv3.WithLimit(queueReadLimit),
					clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))})})
		resp, err = a.d.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0)).
			Then(clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(tail), ">", lo), clientv3.Compare(clientv3.Value(tail), "<", hi)},
				append([]clientv3.Op{clientv3.OpGet(tail)}, puts...),
				[]clientv3.Op{clientv3.OpTxn(
					[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(tail), ">", 0)},
					[]clientv3.Op{clientv3.OpGet(tail)},
					[]clientv3.Op{empty})})).
			Else(clientv3.OpGet(a.key)).
			Commit()
		if err != nil && !rejected(err) {
			// Unknown outcome: the Put may yet be applied.
			a.dirty = true
		}
		return err
	})
	if err != nil {
		return a.txnErr("queue", err)
	}
	if !resp.Succeeded {
		return a.joinedUnseen(ctx, resp.Responses[0].GetResponseRange().Kvs, resp.Header.Revision)
	}
	byTail := resp.Responses[0].GetResponseTxn()
	if !byTail.Succeeded {
		other := byTail.Responses[0].GetResponseTxn()
		if other.Succeeded {
			// A tail, not of our kind.
			kvs := other.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 1 {
				if label, _, _, ok := parseTail(kvs[0].Value); ok && label != a.label {
					return a.kindErr(label)
				}
			}
			// A tail dlock did not write (or gone just now): go by the
			// entries.
			return a.joinBehind(ctx, nil)
		}
		in := other.Responses[0].GetResponseTxn()
		if in.Succeeded || in.Responses[0].GetResponseTxn().Succeeded {
			// Queued into an empty queue: the oldest entry, granted.
			a.created(resp.Header.Revision)
			return nil
		}
		return a.joinBehind(ctx, in.Responses[0].GetResponseTxn().Responses[0].GetResponseRange())
	}
	a.created(resp.Header.Revision)
	// The tail was written with the newest entry, in the same write and on
	// the same lease, and is deleted when that entry goes (by its release,
	// or with its lease): it names an entry that exists, and its mod
	// revision is that entry's create revision. Only a hand-made change
	// breaks this; the wait checks the entry at its first renewal (checkQueue).
	r := byTail.Responses[0].GetResponseRange()
	_, mode, entry, _ := parseTail(r.Kvs[0].Value)
	if !isEntry(a.dir, entry) || entry == a.key {
		// Not an entry's key, or ours: a tail left by an entry deleted
		// by hand (ours, before we queued again with the same lease).
		return a.evaluate(ctx, a.rev, false, true)
	}
	a.pred, a.predRev = entry, r.Kvs[0].ModRevision
	if a.req.Mode == driver.Shared && mode == driver.Exclusive && !a.semaphore() {
		// A reader behind a writer: the nearest one ahead, the one it
		// waits for (queue.go). No read.
		return nil
	}
	if a.req.Mode == driver.Exclusive {
		return nil // a writer or a lock waits for the entry just ahead
	}
	return a.evaluate(ctx, a.rev, true, true)
}

// joinedUnseen handles a join whose entry existed already: an earlier try
// of this call created it, and its reply was lost. kvs is our entry.
func (a *attempt) joinedUnseen(ctx context.Context, kvs []*mvccpb.KeyValue, rev int64) error {
	if len(kvs) == 1 {
		a.rev = kvs[0].CreateRevision
	}
	if a.rev == 0 {
		return errRequeue
	}
	a.lostJoin = true
	return a.evaluate(ctx, rev, false, true)
}

// joinBehind queues behind entries that have no tail: it reads the newest
// entry (r, if the join's Txn read it, has the newest keys), checks its
// kind, and creates our entry in a Txn that requires that entry to still
// exist: it then vouches for the kind of the whole queue (see the kind
// check). If it went meanwhile, it starts the join again.
func (a *attempt) joinBehind(ctx context.Context, r *etcdserverpb.RangeResponse) error {
	for {
		var witness *mvccpb.KeyValue
		var label string
		if r != nil {
			label, witness = firstLabel(a.dir, r.Kvs)
		}
		if witness == nil {
			var err error
			if label, witness, err = a.someEntry(ctx); err != nil {
				return err
			}
			if witness == nil {
				return a.join(ctx) // only markers left: an empty queue
			}
		}
		r = nil
		if label != a.label {
			return a.kindErr(label)
		}
		// Unless our entry exists, create it if the entry read still
		// exists.
		resp, err := a.createIf(ctx, clientv3.Compare(clientv3.CreateRevision(string(witness.Key)), "=", witness.CreateRevision))
		if err != nil {
			return a.txnErr("queue", err)
		}
		if resp.Succeeded {
			a.created(resp.Header.Revision)
			return a.evaluate(ctx, a.rev, false, true)
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			return a.joinedUnseen(ctx, kvs, resp.Header.Revision)
		}
	}
}

// createIf runs the Txn of a join or try that creates our entry (puts)
// only if our entry does not exist and witness, the kind check, holds; else
// it reads our entry, which an earlier Txn of this call whose reply was
// lost may have created. An unknown outcome marks the attempt dirty: the
// Put may yet be applied.
func (a *attempt) createIf(ctx context.Context, witness clientv3.Cmp) (*clientv3.TxnResponse, error) {
	var resp *clientv3.TxnResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		resp, err = a.d.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0), witness).
			Then(a.puts()...).
			Else(clientv3.OpGet(a.key)).
			Commit()
		if err != nil && !rejected(err) {
			a.dirty = true
		}
		return err
	})
	return resp, err
}

// created records that the write at rev created our entry (and removed
// the release marker that puts drops): the entry's revision, and the
// revision seen.
func (a *attempt) created(rev int64) {
	a.rev, a.seen = rev, rev
	a.l.marker = ""
}

// txnErr handles an error from the Txn that creates our entry.
func (a *attempt) txnErr(what string, err error) error {
	if isLeaseNotFound(err) {
		// The lease expired between taking and using it: take another.
		a.l, a.dirty = nil, false
		return errRequeue
	}
	return a.d.wrapErr(what, err)
}

// freshen renews the lease of a call that has just been granted the key if
// its last renewal is old (a slow request, a server restart): the grant's
// validity counts from that renewal, and would be about to lapse. A renewal
// that succeeds proves that etcd never dropped the lease, nor our entry with
// it.
func (a *attempt) freshen(ctx context.Context) error {
	if time.Since(a.l.since()) < a.l.ttl/2 {
		return nil
	}
	err := retry(ctx, func(ctx context.Context) error { return a.l.keepAlive(ctx, a.d.lc) })
	if errors.Is(err, driver.ErrNotHeld) {
		a.l, a.dirty = nil, false
		return errRequeue
	}
	if err != nil {
		return a.d.wrapErr("renew the lease", err)
	}
	return nil
}

// grant hands the lease to a new grant.
func (a *attempt) grant(ctx context.Context) *grant {
	g := &grant{
		d:         a.d,
		l:         a.l,
		dir:       a.dir,
		key:       a.key,
		token:     a.rev,
		seen:      a.seen,
		validFrom: a.l.since(),
		reusable:  !a.dirty,
		mode:      a.req.Mode,
		label:     a.label,
		lost:      make(chan error, 1),
	}
	switch {
	case a.semaphore():
		// Its entries are all Shared: no markers.
	case a.lastPred != "":
		g.markers = []string{markerKey(a.lastPred)}
		g.strays = a.byRead && a.waited
	case a.lostJoin && a.req.Wait && a.req.Mode == driver.Exclusive:
		g.markers = a.d.strayMarkers(ctx, a.dir, a.key)
	}
	a.l = nil
	return g
}

// strayMarkers returns the release markers in the queue dir, for a holder
// of it whose entry is key: a call whose join reply was lost and that holds
// the key without having waited for anybody (the entry ahead of it when it
// joined may have been released for it before the retry that found its
// entry), or one granted by a read of the queue after a wait (see
// grant.strays). Such a marker is ours to delete: it would stay until the
// releaser's lease is used again or ends. While we hold the key, every
// marker of the queue is of an entry ahead of ours, gone, and has served or
// was left by a waiter that gave up or died: nobody waits for an entry
// older than ours, a watch that saw the release received the marker with
// it, and one that starts later reads the queue instead. Nor can a new one
// come while we hold (only an Exclusive holder's release writes one). Our
// own entry's marker is left out: our release writes it. Best effort: it
// gives up on error, and the markers then go with their leases.
func (d *etcdDriver) strayMarkers(ctx context.Context, dir, key string) []string {
	var markers []string
	for limit := int64(queueReadLimit); ; limit *= 8 {
		var resp *clientv3.GetResponse
		err := retry(ctx, func(ctx context.Context) (err error) {
			// Range over the queue, keys only, sorted by value: markers
			// (the empty values) first.
			resp, err = d.kv.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
				clientv3.WithSort(clientv3.SortByValue, clientv3.SortAscend), clientv3.WithLimit(limit))
			return err
		})
		if err != nil {
			return markers
		}
		markers = markers[:0]
		for _, kv := range resp.Kvs {
			if k := string(kv.Key); !isEntry(dir, k) && k != markerKey(key) {
				markers = append(markers, k)
			}
		}
		// Done unless every key read was a marker and more may follow
		// (at most one marker per live lease: the loop ends).
		if !resp.More || countEntries(dir, resp.Kvs) > 0 {
			return markers
		}
	}
}

// abandon removes every trace of a failed or cancelled call from etcd.
func (a *attempt) abandon(ctx context.Context) {
	// One bound for all of it, even if ctx has ended: see revoke.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	switch {
	case a.l == nil:
	case a.rev == 0 && !a.dirty:
		// Nothing is attached to the lease: keep it for the next call.
		a.d.recycle(ctx, a.l)
	default:
		// Revoking the lease deletes our entry, whether we were waiting
		// or had just been granted the key.
		a.d.revoke(ctx, a.l)
	}
	a.l = nil
	if p := cmp.Or(a.pred, a.lastPred); p != "" && !a.semaphore() {
		// The entry ahead may have been released for us just now: its
		// marker is ours to delete. Left alone, it would stay until the
		// releaser's lease is used again or ends.
		a.d.deleteMarker(ctx, markerKey(p))
	}
}

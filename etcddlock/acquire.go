package etcddlock

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/dlockdev/dlock/driver"
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

	a := &attempt{d: d, req: req, dir: d.queueDir(req.Key), secs: seconds(req.TTL), label: driver.KindLabel(req.Kind, req.Limit)}
	g, err := a.run(ctx)
	if err != nil {
		a.abandon(ctx)
		return nil, cancelledErr(ctx, err)
	}
	return g, nil
}

// cancelledErr returns the error of a call that failed with err: ctx's own
// error if ctx was cancelled (by the caller, or by Client.Close) and err is
// only that cancellation, wrapped on its way up, wherever the call was when
// it landed (a watch returns it bare, a read wraps it with its step): one
// cause, one error. An error that carries an etcd failure (retry's "last
// etcd error", a refused request) is kept whole, and so is a deadline's:
// the step in flight when it expired says what was slow.
func cancelledErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if !errors.Is(cerr, context.Canceled) {
		return err
	}
	// The chain of single wraps ends at the cancellation itself only if
	// nothing else was joined in.
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e == cerr {
			return cerr
		}
	}
	return err
}

// step is what an attempt does next. run executes one step at a time; each
// step's function does that step's requests and sets the next step.
//
//	stepLease    --a lease------------------------------------> stepJoin, or stepTry for TryLock
//	stepTry      --created where the rule grants it------------> stepFreshen
//	stepJoin     --queued into an empty queue-----------------> stepFreshen
//	stepJoin     --queued behind the tail's entry--------------> stepWait, or stepEvaluate
//	stepJoin     --no tail, entries left; stepBehind queued----> stepEvaluate
//	stepEvaluate --granted-------------------------------------> stepTouch (a semaphore's waiter), stepFreshen
//	stepEvaluate --the plan names what to wait for-------------> stepWait
//	stepWait     --the release marker of the entry waited for--> stepFreshen
//	stepWait     --any other change, or the watch broke---------> stepEvaluate
//	stepTouch, stepFreshen --> granted
//
// A kind mismatch, TryLock refused, or a failed request ends the attempt.
// errRequeue (our entry or lease is gone) drops the place and goes back to
// stepLease after a backoff.
type step uint8

const (
	stepLease    step = iota // take a lease, if we have none
	stepTry                  // TryLock: create our entry only where granted at once
	stepJoin                 // Lock: create our entry at the end of the queue
	stepBehind               // queue behind the newest entry, found by a read (no tail)
	stepEvaluate             // read the queue and plan (queue.go)
	stepWait                 // wait for what the plan names to change (wait.go)
	stepTouch                // a semaphore's waiter granted: tell the one behind it
	stepFreshen              // renew an old lease before the grant
	stepGranted
)

// attempt is one Acquire call.
type attempt struct {
	d     *etcdDriver
	req   *driver.AcquireRequest
	dir   string // the lock's queue directory
	secs  int64  // TTL in whole seconds
	label string // driver.KindLabel of the request: what every entry of the queue must be

	step    step
	requeue backoff // between losing a place and queueing again

	l     *etcdLease // nil until taken, and after it was given up
	key   string     // our entry: dir + the lease's id
	dirty bool       // a request that may have created our entry failed: its outcome is unknown

	place
}

// place is what an attempt knows of its entry and of what it waits for:
// losing the entry drops it whole.
type place struct {
	rev  int64 // create revision of our entry once created: the fencing token
	seen int64 // a revision at which what we wait for and our entry both existed

	// What we wait for (queue.go): an entry older than ours (pred), or,
	// for a semaphore's first waiter, every entry ahead (ahead).
	pred    string
	predRev int64           // its create revision (and mod revision: see predChanged)
	ahead   map[string]bool // nil unless we wait for any of them
	proof   bool            // pred's release marker proves our grant (queue.Plan.ExclusiveRelease)

	// The next evaluation reads at a revision not older than minRev;
	// atJoin: it follows our join (pred, if set, is the tail's entry).
	minRev  int64
	atJoin  bool
	witness *mvccpb.KeyValue // stepBehind: the newest entry, if the join read it

	lastPred string  // the last entry we waited for: its release marker is ours to delete
	lostJoin bool    // our join's reply was lost: we may not know what we waited for
	waited   bool    // the grant rule refused us at least once
	byRead   bool    // the wait ended with a read of the queue, not a marker (see grant.strays)
	rewatch  backoff // between watches that ended by themselves
}

// semaphore reports whether the call is a semaphore's: the one kind whose
// waiters count the entries ahead rather than wait for one.
func (a *attempt) semaphore() bool { return a.req.Kind == driver.KindSemaphore }

// run executes the attempt's steps until it is granted or fails.
func (a *attempt) run(ctx context.Context) (*grant, error) {
	for {
		var err error
		switch a.step {
		case stepLease:
			err = a.takeLease(ctx)
		case stepTry:
			err = a.try(ctx)
		case stepJoin:
			err = a.join(ctx)
		case stepBehind:
			err = a.behind(ctx)
		case stepEvaluate:
			err = a.evaluate(ctx)
		case stepWait:
			err = a.wait(ctx)
		case stepTouch:
			err = a.touch(ctx)
		case stepFreshen:
			err = a.freshen(ctx)
		case stepGranted:
			return a.grant(ctx), nil
		}
		if errors.Is(err, errRequeue) {
			a.place, a.step = place{}, stepLease
			err = a.requeue.wait(ctx)
		}
		if err != nil {
			return nil, err
		}
	}
}

// takeLease takes a lease for our entry (stepLease).
func (a *attempt) takeLease(ctx context.Context) error {
	if a.l == nil {
		l, err := a.d.takeLease(ctx, a.secs)
		if err != nil {
			return err
		}
		a.l, a.key = l, entryKey(a.dir, l.id)
	}
	a.step = stepJoin
	if !a.req.Wait {
		a.step = stepTry
	}
	return nil
}

// evaluateAt goes to stepEvaluate, reading at a revision not older than minRev.
func (a *attempt) evaluateAt(minRev int64) {
	a.minRev, a.step = minRev, stepEvaluate
}

// granted goes on from a grant by the rule: a semaphore's waiter touches
// its entry first (wait.go).
func (a *attempt) granted() {
	a.pred, a.ahead, a.step = "", nil, stepFreshen
	if a.waited && a.semaphore() {
		a.step = stepTouch
	}
}

// loseLease forgets a lease that is gone, and with it our entry.
func (a *attempt) loseLease() error {
	a.l, a.dirty = nil, false
	return errRequeue
}

// freshen renews the lease of a call that has just been granted the key if
// its last renewal is old (a slow request, a server restart): the grant's
// validity counts from that renewal, and would be about to lapse. A renewal
// that succeeds proves that etcd never dropped the lease, nor our entry with
// it.
func (a *attempt) freshen(ctx context.Context) error {
	if time.Since(a.l.since()) >= a.l.ttl/2 {
		err := retry(ctx, func(ctx context.Context) error { return a.l.keepAlive(ctx, a.d.lc) })
		if errors.Is(err, driver.ErrNotHeld) {
			return a.loseLease()
		}
		if err != nil {
			return a.d.wrapErr("renew the lease", err)
		}
	}
	a.step = stepGranted
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

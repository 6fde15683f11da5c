package etcddlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// errRequeue: the call lost its place in the queue (its lease expired, or
// somebody deleted its entry); it queues again, at the end.
var errRequeue = errors.New("etcddlock: place in the queue lost")

// errWatch: a watch ended by itself (no leader, stream broken); read the
// queue again after a pause.
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

	a := &attempt{d: d, req: req, dir: d.queueDir(req.Key), label: driver.KindLabel(req.Kind, req.Limit)}
	g, err := a.run(ctx)
	if err != nil {
		a.abandon(ctx)
		return nil, cancelledErr(ctx, err)
	}
	return g, nil
}

// cancelledErr returns ctx's own error if ctx was cancelled (by the caller
// or Client.Close) and err is only that, wrapped by whichever step it landed
// in; an etcd failure is kept whole, and so is a deadline (its step says
// what was slow).
func cancelledErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if !errors.Is(cerr, context.Canceled) {
		return err
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e == cerr {
			return cerr
		}
	}
	return err
}

// step is what an attempt does next: run executes one at a time, and each
// step's function does its requests and sets the next.
//
//	stepLease    --a lease-------------------------------------> stepJoin, or stepTry for TryLock
//	stepTry      --created where the rule grants it------------> stepFreshen
//	stepJoin     --queued into an empty queue------------------> stepFreshen
//	stepJoin     --queued behind the tail's entry--------------> stepWait, or stepEvaluate
//	stepJoin     --no tail, entries left; stepBehind queued----> stepEvaluate
//	stepEvaluate --granted-------------------------------------> stepFreshen
//	stepEvaluate --the plan names what to wait for-------------> stepWait
//	stepWait     --the release marker of the entry waited for--> stepFreshen
//	stepWait     --any other change, or the watch broke--------> stepEvaluate
//	stepFreshen  --lease fresh---------------------------------> granted
//
// Any other error ends the attempt; errRequeue (our entry or lease is gone)
// drops the place and goes back to stepLease after a backoff.
type step uint8

const (
	stepLease    step = iota // take a lease, if we have none
	stepTry                  // TryLock: create our entry only where granted at once
	stepJoin                 // Lock: create our entry at the end of the queue
	stepBehind               // queue behind the newest entry, found by a read (no tail)
	stepEvaluate             // read the queue and plan (queue.go)
	stepWait                 // wait for what the plan names to change (wait.go)
	stepFreshen              // renew an old lease
	stepGranted
)

// attempt is one Acquire call.
type attempt struct {
	d     *etcdDriver
	req   *driver.AcquireRequest
	dir   string // the lock's queue directory
	label string // driver.KindLabel of the request: what every entry of the queue must be

	step    step
	requeue backoff // between losing a place and queueing again

	l     *etcdLease // nil until taken, and after it was given up
	slot  *slot      // the name l lends us, with l
	dl    *etcdLease // l's delay lease for our delay record (lockdelay.go); nil without a delay
	key   string     // our entry: dir + the lease's id and the slot's number
	keyB  []byte     // key, shared by the messages that name it (never changed)
	dirty bool       // a request that may have created our entry failed: its outcome is unknown

	// watching: a semaphore's waiter's watches by key, kept from a wait
	// to the next (wait.go); cancelled by unwatch.
	watching map[string]*keyWatch

	place
}

// place is what an attempt knows of its entry and its wait: dropped whole
// when the entry is lost.
type place struct {
	rev  int64 // create revision of our entry once created: the fencing token
	seen int64 // a revision at which what we wait for and our entry both existed

	// What we wait for (queue.go): the entry pred, or any of ahead.
	pred    string
	predRev int64           // its create revision
	ahead   map[string]bool // nil unless we wait for need of them to go
	need    int             // how many of ahead must go before we are granted or read again
	proof   bool            // pred's release marker proves our grant (queue.Plan.ExclusiveRelease)
	// counted: need deletes of ahead grant us (a complete count, no
	// lock-delay ahead); else they send us to read the queue.
	counted bool
	// delaysAhead: the last read of the queue found a lock-delay record
	// ahead of our entry (lockdelay.go).
	delaysAhead bool

	minRev  int64            // the next read of the queue (scan) reads at minRev or later
	witness *mvccpb.KeyValue // stepBehind: the newest entry, if the join read it

	// alone: the small Txn created our entry into a queue with no key
	// (takeFree): no tail, no marker to delete; its release is a lone
	// holder's unless somebody queued behind it (grant.Release).
	alone bool

	lastPred   string  // the last entry we waited for: its release marker is ours to delete
	lostCreate bool    // a reply to our create was lost: we may not know what we waited for
	byRead     bool    // the wait ended with a read of the queue, not a marker (see grant.strays)
	rewatch    backoff // between watches that ended by themselves
	// delayUntil: when the first lock-delay of an ended entry ahead is
	// over (lockdelay.go), which the wait wakes for; zero if none.
	delayUntil time.Time
}

// semaphore reports whether the call is a semaphore's (its waiters count).
func (a *attempt) semaphore() bool { return a.req.Kind == driver.KindSemaphore }

// steps maps each step but stepGranted to its function.
var steps = [...]func(*attempt, context.Context) error{
	stepLease:    (*attempt).takeLease,
	stepTry:      (*attempt).try,
	stepJoin:     (*attempt).join,
	stepBehind:   (*attempt).behind,
	stepEvaluate: (*attempt).evaluate,
	stepWait:     (*attempt).wait,
	stepFreshen:  (*attempt).freshen,
}

// run executes the attempt's steps until it is granted or fails.
func (a *attempt) run(ctx context.Context) (*grant, error) {
	defer a.unwatch(nil)
	for a.step != stepGranted {
		err := steps[a.step](a, ctx)
		if errors.Is(err, errRequeue) {
			a.unwatch(nil)
			a.place, a.step = place{}, stepLease
			err = a.requeue.wait(ctx)
		}
		if err != nil {
			return nil, err
		}
	}
	return a.grant(ctx), nil
}

// takeLease takes a lease for our entry (stepLease).
func (a *attempt) takeLease(ctx context.Context) error {
	if a.l == nil {
		l, s, err := a.d.takeCallLease(ctx, seconds(a.req.TTL))
		if err != nil {
			return err
		}
		a.l, a.slot, a.key = l, s, entryKey(a.dir, l.id, s.n)
		a.keyB = []byte(a.key)
	}
	if a.req.LockDelay > 0 && a.dl == nil {
		if err := a.takeDelayLease(ctx); err != nil {
			return err
		}
	}
	a.step = stepJoin
	if !a.req.Wait {
		a.step = stepTry
	}
	return nil
}

// granted goes on from a grant by the rule.
func (a *attempt) granted() {
	a.unwatch(nil)
	a.pred, a.ahead, a.step = "", nil, stepFreshen
}

// loseLease forgets a lease that is gone, and with it our entry and its
// name.
func (a *attempt) loseLease() error {
	a.d.retire(a.l, fmt.Errorf("%w: etcd lease %x expired or was revoked", driver.ErrNotHeld, int64(a.l.id)))
	a.l, a.slot, a.dl, a.dirty = nil, nil, nil, false
	return errRequeue
}

// freshen readies a call just granted (stepFreshen): an old lease is
// renewed (docs/etcd.md, Operations). A semaphore's waiter writes nothing
// for the waiters behind it: they wait for deletes alone (evaluate).
func (a *attempt) freshen(ctx context.Context) error {
	// The grant's validity counts from the last renewal: an old one is
	// renewed, which proves that etcd never dropped the lease, nor our
	// entry; a lease this Client gave up fails its renewal at once.
	if a.l.deadErr() != nil || time.Since(a.l.since()) >= a.l.ttl/2 {
		if err := a.renew(ctx); errors.Is(err, driver.ErrNotHeld) {
			return a.loseLease()
		} else if err != nil {
			return err
		}
	}
	// Our delay record must last the delay past the validity, which
	// counts from the lease's last renewal.
	err := retry(ctx, func(ctx context.Context) error { return a.d.renewedDelay(ctx, a.dl, a.l.since()) })
	if err != nil {
		return a.d.wrapErr("renew the lock-delay's lease", err)
	}
	a.step = stepGranted
	return nil
}

// renew renews our lease, retrying a busy etcd until ctx ends.
func (a *attempt) renew(ctx context.Context) error {
	err := retry(ctx, func(ctx context.Context) error { return a.d.renewLease(ctx, a.l) })
	return a.d.wrapErr("renew the lease", err)
}

// grant hands the lease to a new grant.
func (a *attempt) grant(ctx context.Context) *grant {
	g := &grant{
		d:         a.d,
		l:         a.l,
		dl:        a.dl,
		slot:      a.slot,
		dir:       a.dir,
		key:       a.key,
		keyB:      a.keyB,
		token:     a.rev,
		seen:      a.seen,
		validFrom: a.l.since(),
		reusable:  !a.dirty,
		alone:     a.alone,
		mode:      a.req.Mode,
		label:     a.label,
		delayKey:  a.delayRecord(),
	}
	switch {
	case a.semaphore():
		// Its entries are all Shared: no markers.
	case a.lastPred != "":
		g.markers = []string{markerKey(a.lastPred)}
		g.strays = a.byRead
	case a.lostCreate && a.req.Wait && a.req.Mode == driver.Exclusive:
		g.markers = a.d.strayMarkers(ctx, a.dir, a.key)
	}
	a.l, a.slot, a.dl = nil, nil, nil
	return g
}

// abandon removes every trace of a failed or cancelled call from etcd.
func (a *attempt) abandon(ctx context.Context) {
	// One bound for all of it, even if ctx has ended: see revoke.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	if a.l != nil && (a.rev != 0 || a.dirty) {
		a.dropDelay(ctx)
	}
	if a.l != nil {
		a.d.dropEntry(ctx, a.l, a.slot, a.dir, a.key, tailValue(a.label, a.req.Mode, a.key), a.rev != 0 || a.dirty, a.dirty)
	}
	a.l, a.slot, a.dl = nil, nil, nil
	if p := cmp.Or(a.pred, a.lastPred); p != "" && !a.semaphore() {
		a.d.deleteMarker(ctx, markerKey(p)) // the entry ahead may have been released for us just now
	}
}

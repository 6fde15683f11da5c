package etcddlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// grant is a held key: our entry, the oldest of its queue, and the lease
// it is attached to. It implements driver.Grant.
type grant struct {
	d     *etcdDriver
	l     *etcdLease // shared with the Client's other calls of its TTL
	dl    *etcdLease // l's delay lease, of our delay record; nil without one
	slot  *slot      // the name l lent our entry
	dir   string     // the lock's queue directory
	key   string     // our entry
	keyB  []byte     // key, shared by the messages that name it (never changed)
	token int64      // its create revision
	// markers are release markers that our release deletes: that of the
	// entry we waited for last, written for us, which has served (or
	// those strayMarkers found).
	markers []string
	// strays: the release also deletes every other marker of the queue
	// (strayMarkers). Set for a waiter granted by a read of the queue,
	// not by a marker: a marker may have been written for it unseen. The
	// waiter ahead of it gave up just as the holder ahead of that one
	// released; the one that gave up deleted that holder's marker before
	// the release wrote it, and this waiter, woken by the give-up (no
	// marker), read the queue after the release and was granted without
	// ever watching the holder's entry. Nobody else would delete that
	// marker; its lease, the releaser's, lives on in its client's idle
	// pool (TestHandOff_waiterAheadGivesUpBeforeRelease_noMarkerLeft). A
	// marker is written in the same revision as the delete of its entry,
	// so the read that granted us, after that delete, came after it: the
	// read at our release, later still, finds it unless it has gone. Read
	// at the release rather than at the grant: with the release's
	// context, which must hold for the release anyway, and not adding to
	// the wait of the Lock.
	strays    bool
	seen      int64 // a revision at which it existed
	validFrom time.Time
	reusable  bool // no create request had an unknown outcome: the release needs no fence
	alone     bool // created by the small Txn into a queue with no key: see Release
	mode      driver.Mode
	label     string // driver.KindLabel of the key: the entry's header (keys.go)
	delayKey  string // our lock-delay's record (lockdelay.go); "" without one

	mu sync.Mutex
	// lost receives once if the entry is deleted behind our back, unless
	// onLost is set; made by the first Lost or lose, as the lease engine
	// takes AfterLost instead. Guarded by mu.
	lost        chan error
	onLost      func(reason error) // AfterLost's function; guarded by mu
	lostErr     error              // why our entry is gone, once known; guarded by mu
	watchCancel context.CancelFunc // non-nil once the watch runs; guarded by mu
	watchDone   chan struct{}      // closed when the watch has returned; guarded by mu
	released    bool               // guarded by mu
}

// Token is the create revision of our entry: etcd's revision counter only
// goes up, across the whole cluster and across restarts. In every mode a
// later grant of the key has a higher one: grants happen in queue order,
// which is create-revision order. The entries ahead of an entry only go
// (new ones are created behind every existing one), so once the grant rule
// grants an entry it grants it for good; and if it grants an entry it
// grants every entry ahead of it too (fewer entries are ahead of those,
// and all of them compatible: driver.Admits is monotone in both counts).
// So if entry E is granted at a revision where entry F is not, E is ahead
// of F, with a lower create revision; entries granted at one revision
// (readers, permits) are granted together, and none is earlier than the
// other. A grant is learnt by its client a little after that revision,
// but its lease, and the fencing, count from the grant.
func (g *grant) Token() uint64 { return uint64(g.token) }

// ValidFrom is when the latest grant or renewal of the lease that was
// confirmed was sent: for a waiter that became the holder, its last renewal
// while waiting.
func (g *grant) ValidFrom() time.Time { return g.validFrom }

// Validity is the lease's TTL as granted by etcd, counted by etcd from when
// it handles each grant or renewal.
func (g *grant) Validity() time.Duration { return g.l.ttl }

// Lost fires if our entry is deleted while we hold it, unless AfterLost
// was called.
func (g *grant) Lost() <-chan error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lostChan()
}

// lostChan returns lost, made if need be. Its caller holds mu.
func (g *grant) lostChan() chan error {
	if g.lost == nil {
		g.lost = make(chan error, 1)
	}
	return g.lost
}

// AfterLost has f called, in a goroutine of its own, if our entry is
// deleted while we hold it (driver.LostNotifier): the lease engine then
// needs no goroutine of its own per held lock.
func (g *grant) AfterLost(f func(reason error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lostErr != nil {
		go f(g.lostErr)
		return
	}
	g.onLost = f
}

// lose reports our entry gone, once: to AfterLost's function, or on Lost.
func (g *grant) lose(reason error) {
	g.mu.Lock()
	f := g.onLost
	g.lostErr = reason
	var lost chan error
	if f == nil {
		lost = g.lostChan()
	}
	g.mu.Unlock()
	if f != nil {
		go f(reason)
		return
	}
	lost <- reason
}

// Renew renews the lease, which keeps our entry (and the others of the
// lease: RenewBatch renews them all with one request).
func (g *grant) Renew(ctx context.Context) error {
	g.startWatch()
	return g.d.renewLease(ctx, g.l)
}

// startWatch starts watching our entry for deletion at the first renewal:
// a key held for less than a third of its TTL never pays for a watch, and
// one held longer learns at once that its entry was deleted behind its back
// (by an operator or a buggy program). The watch starts at the revision
// after the one where the entry was last seen, so it misses nothing that
// happened before it started.
func (g *grant) startWatch() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.watchDone != nil || g.released {
		return
	}
	ctx, cancel := context.WithCancel(g.d.ctx)
	g.watchCancel, g.watchDone = cancel, make(chan struct{})
	go g.watch(ctx)
}

func (g *grant) stopWatch() {
	g.mu.Lock()
	g.released = true
	cancel, done := g.watchCancel, g.watchDone
	g.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (g *grant) watch(ctx context.Context) {
	defer close(g.watchDone)
	rev := g.seen + 1
	var b backoff
	for {
		if g.watchFrom(ctx, &rev) {
			return
		}
		// The watch ended: released, closed, or by itself (compaction
		// of rev, a broken stream). In the last case, look at the entry
		// and watch again from there.
		if b.wait(ctx) != nil {
			return
		}
		// Range, our entry.
		resp, err := g.d.kv.Get(ctx, g.key, clientv3.WithKeysOnly())
		if err != nil {
			continue
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != g.token {
			g.lose(fmt.Errorf("its etcd key is gone")) // its name would repeat the lock's key
			return
		}
		rev = resp.Header.Revision + 1
	}
}

// watchFrom watches our entry from *rev until the watch ends, advancing
// *rev, and reports whether it reported the entry's deletion (lose).
func (g *grant) watchFrom(ctx context.Context, rev *int64) bool {
	ctx, cancel := context.WithCancel(watchCtx(ctx))
	defer cancel()
	// Watch create: deletes of our entry since *rev.
	for wr := range g.d.w.Watch(ctx, g.key, clientv3.WithRev(*rev), clientv3.WithFilterPut()) {
		if wr.Err() != nil || wr.Canceled {
			return false
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				g.lose(fmt.Errorf("its etcd key was deleted at revision %d", ev.Kv.ModRevision))
				return true
			}
		}
		*rev = max(*rev, wr.Header.Revision+1)
	}
	return false
}

// Release deletes our entry, which hands the key to the next waiter, and
// lends its name to a later call. It never revokes the lease, which other
// entries of the Client share.
func (g *grant) Release(ctx context.Context) error {
	g.stopWatch()
	if !g.reusable {
		// A create request of this call had an unknown outcome: fence
		// it off, so that a late copy cannot create our entry again
		// once this release has deleted it.
		if err := g.d.fence(ctx, g.l); err != nil {
			g.d.giveUp(ctx, g.l, err)
			return g.d.wrapErr("fence the lease", err)
		}
	}
	if g.strays {
		for _, m := range g.d.strayMarkers(ctx, g.dir, g.key) {
			if !slices.Contains(g.markers, m) { // a Txn may not name a key twice
				g.markers = append(g.markers, m)
			}
		}
		g.strays = false
	}
	uncertain := false // a try failed after etcd may have applied it
	send := func(ctx context.Context, cmps []*pb.Compare, then []*pb.RequestOp) (resp *pb.TxnResponse, err error) {
		err = retry(ctx, func(ctx context.Context) (err error) {
			resp, err = g.d.txn(ctx, cmps, then, nil)
			if err != nil && !rejected(err) {
				uncertain = true
			}
			return err
		})
		return resp, err
	}
	commit := func(cmps []*pb.Compare, then []*pb.RequestOp) (*pb.TxnResponse, error) {
		resp, err := send(ctx, cmps, then)
		if err != nil && !isLeaseNotFound(err) {
			// Our entry would stay, and hold the key, on a lease that the
			// Client renews for its other entries: try on a while even if
			// ctx has ended, as a cancelled Lock does (abandon).
			bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
			defer cancel()
			resp, err = send(bctx, cmps, then)
			if err != nil && !isLeaseNotFound(err) {
				// Then stop renewing the lease: etcd drops it, and our
				// entry, within the TTL.
				g.d.giveUp(bctx, g.l, err)
			}
		}
		return resp, err
	}
	if g.alone && g.delayKey == "" && len(g.markers) == 0 {
		// Txn: if our entry is still the one we created and there is
		// no tail, delete it. Nobody queued behind us then: every
		// entry created behind another writes the tail, which only
		// the release or the lease of the entry it names deletes. The
		// full release below does exactly this when there is no tail,
		// in a request half the size, which etcd keeps in memory until
		// its next snapshot, with half the protocol messages for it to
		// decode, log and apply, and no nested Txn.
		s := new(struct {
			cmps [2]*pb.Compare
			then [1]*pb.RequestOp
		})
		s.cmps[0], s.cmps[1] = cmpCreate(g.keyB, pb.Compare_EQUAL, g.token), cmpCreate(tailKey(g.dir), pb.Compare_EQUAL, 0)
		s.then[0] = opDelete(g.keyB)
		resp, err := commit(s.cmps[:], s.then[:])
		if err != nil {
			return g.releaseErr(err)
		}
		if resp.Succeeded {
			g.l.putSlot(g.slot)
			return nil
		}
		// Somebody queued behind us (or our entry is gone): the full
		// release, and this Client's next joins of the key go straight
		// to the full join.
		g.d.busy.saw(g.dir)
	}
	// The request's slices, in one allocation: this Txn is half of every
	// contended Lock and Unlock.
	s := new(struct {
		ours, newer [1]*pb.Compare
		mark, els   [1]*pb.RequestOp
	})
	then := make([]*pb.RequestOp, 0, 3+len(g.markers))
	then = append(then, opDelete(g.keyB))
	for _, m := range g.markers {
		then = append(then, opDelete(m))
	}
	if g.delayKey != "" {
		// A release starts no lock-delay: our record goes with our entry.
		then = append(then, opDelete(g.delayKey))
	}
	// A Shared holder writes no marker: readers or permits may be held
	// ahead of it, and a marker tells the waiter behind that nothing is.
	var mark []*pb.RequestOp
	if g.mode == driver.Exclusive {
		marker := append(g.keyB[:len(g.keyB):len(g.keyB)], markerSuffix...)
		s.mark[0], mark = opPut(marker, "", g.l.id), s.mark[:]
		// The marker is attached to our lease; the next entry-creating
		// write of our name deletes it if no waiter did. Recorded
		// before sending, as the write may be applied even if its
		// reply is lost.
		g.slot.marker = marker
	}
	tail := tailBytes(g.dir)
	s.newer[0], s.els[0] = cmpMod(tail, pb.Compare_GREATER, g.token), opDelete(tail)
	then = append(then, opTxn(s.newer[:], mark, s.els[:]))
	s.ours[0] = cmpCreate(g.keyB, pb.Compare_EQUAL, g.token)
	// Txn: if our entry is still the one we created, delete it — the
	// hand-off: the watch of the next waiter, and only that one, fires on
	// it — and delete the marker that was written for us. Then, if the
	// tail names a newer entry (somebody waits behind us), put our release
	// marker, in this same revision, where the next waiter's watch sees
	// it: it then knows that the entry ahead of it went because its holder
	// released, and holds the key without reading the queue (Exclusive
	// holders only). Else the tail names us (or nothing): delete it, as we
	// were the newest entry.
	resp, err := commit(s.ours[:], then)
	if err != nil {
		return g.releaseErr(err)
	}
	if !resp.Succeeded {
		if !uncertain {
			g.slot.marker = nil // not written
		}
		if uncertain && g.leaseAlive(ctx) {
			// An earlier try, whose reply was lost ("timed out",
			// "leader changed", a broken connection), deleted our
			// entry: the release happened. Had the entry gone with an
			// expired lease, the lease would be gone too.
			g.l.putSlot(g.slot)
			return nil
		}
		if g.l.deadErr() == nil && g.delayKey == "" {
			// Deleted by hand: the name is free. (Not one with a delay
			// record, which stays for the lock-delay and would be taken
			// for the next entry of the name's.)
			g.l.putSlot(g.slot)
		}
		return fmt.Errorf("%w: its etcd key was gone already (lease expired or key deleted)", driver.ErrNotHeld)
	}
	if !resp.Responses[len(resp.Responses)-1].GetResponseTxn().Succeeded {
		g.slot.marker = nil // nobody waited: no marker
	}
	g.l.putSlot(g.slot)
	return nil
}

// releaseErr is the error of a release whose Txn failed.
func (g *grant) releaseErr(err error) error {
	if isLeaseNotFound(err) {
		// The marker's put found the lease gone: so is our entry.
		g.d.retire(g.l, fmt.Errorf("%w: etcd lease %x expired or was revoked", driver.ErrNotHeld, int64(g.l.id)))
		return fmt.Errorf("%w: its etcd lease expired or was revoked", driver.ErrNotHeld)
	}
	return g.d.wrapErr("delete the entry", err)
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
			if k := string(kv.Key); strings.HasSuffix(k, markerSuffix) && k != markerKey(key) {
				markers = append(markers, k)
			}
		}
		// Done unless every key read was a marker and more may follow
		// (at most one marker per live lease: the loop ends).
		if !resp.More || firstEntry(dir, resp.Kvs) != nil {
			return markers
		}
	}
}

// leaseAlive reports whether etcd still keeps our lease, by renewing it
// (LeaseKeepAlive, once): etcd never renews a lease it has expired.
func (g *grant) leaseAlive(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(g.l.ttl, revokeTimeout))
	defer cancel()
	return retry(ctx, func(ctx context.Context) error { return g.d.renewLease(ctx, g.l) }) == nil
}

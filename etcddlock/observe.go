package etcddlock

import (
	"context"

	"github.com/dlockdev/dlock/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watch tells of changes to key's queue (an election's Observe): see
// driver.Observer. It is one etcd watch of the key's queue directory, served
// by the driver's watch stream; nothing is read, and nothing polled.
//
// The order is what makes it miss nothing. The watch starts at etcd's
// current revision, and its first value is sent only once etcd has
// confirmed the watch (its created response): every change applied after
// that point is delivered to the watch, and the caller's read (Inspect,
// linearizable) that follows the first value sees every change before it.
// A watch from a past revision (a read's, say) would miss nothing either,
// but etcd serves such "unsynced" watches from a loop that runs every
// 100 ms; one that starts now is handed each event as it is applied.
//
// Every event on an entry counts: a create (a holder, or a candidate that
// waits: a waiter joining or leaving wakes the caller, whose read shows it
// (Client.Watch), or finds the same leader (an election's observer)), a
// delete (a release, an expiry: etcd deletes the entries of an expired lease
// when it revokes it, so an expiry is a notification, never a deadline to
// wake at), a put of an existing entry (Publish).
// Release markers are skipped: they come with the delete of an entry, in
// the same revision. The tail is outside the directory.
//
// The watch ends, and the channel is closed, when ctx ends, when the driver
// is closed, and when etcd ends it: compaction of the revision it has to
// resume from (after its stream broke), a member that loses its leader
// (the watch requires one, see watchCtx), a broken stream the client does
// not resume. The caller watches again and reads again.
func (d *etcdDriver) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer d.inflight.Done()
		defer close(out)
		// Close ends the watch.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(d.ctx, cancel)
		defer stop()
		d.observe(ctx, d.queueDir(key), out)
	}()
	return out, nil
}

// observe runs the watch of dir until it ends, sending coalesced notices to
// out.
func (d *etcdDriver) observe(ctx context.Context, dir string, out chan struct{}) {
	wctx, cancel := context.WithCancel(watchCtx(ctx))
	defer cancel()
	// Watch create: every key of the queue directory, from now.
	wch := d.w.Watch(wctx, dir, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	created, ok := <-wch
	if !ok || created.Err() != nil || created.Canceled || !created.Created {
		return
	}
	notify := func() {
		select {
		case out <- struct{}{}:
		default: // a notice is pending already: it says "changed"
		}
	}
	notify() // the watch is in place: the caller reads the state now
	for wr := range wch {
		// A compacted start revision (the client resumes a broken stream
		// from the next revision it expects), a lost leader, a cancel:
		// the caller watches again.
		if wr.Err() != nil || wr.Canceled || wr.CompactRevision != 0 {
			return
		}
		for _, ev := range wr.Events {
			if isEntry(dir, string(ev.Kv.Key)) {
				notify()
				break
			}
		}
	}
}

var _ driver.Observer = (*etcdDriver)(nil)

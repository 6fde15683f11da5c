package etcddlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// heldWatcher is a real etcd watcher whose watches of keys under prefix
// deliver nothing, not even their created response, until release is
// closed: as a watch waits in line behind the creations of thousands of
// others on its client's gRPC stream (etcd's client sends them one at a
// time).
type heldWatcher struct {
	clientv3.Watcher
	prefix  string
	held    chan string   // receives the key of each watch as it is held
	release chan struct{} // closed to let the held watches start
}

func (h *heldWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if !strings.HasPrefix(key, h.prefix) {
		return h.Watcher.Watch(ctx, key, opts...)
	}
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		select {
		case h.held <- key:
		case <-ctx.Done():
			return
		}
		select {
		case <-h.release:
		case <-ctx.Done():
			return
		}
		// The real watch is created only now, as a delayed creation is:
		// it starts at the revision current at its creation.
		for wr := range h.Watcher.Watch(ctx, key, opts...) {
			select {
			case out <- wr:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// waitRenewTTL is the waiter's lease: renewed a third of it after its last
// renewal, so a waiter that renews while its watch starts renews within
// 2 s, one that does not loses its lease after 6 s.
const waitRenewTTL = 6 * time.Second

// A waiter keeps its lease while its watch has not started yet: renewals
// run from the moment it waits, not from its watch's created response.
// Under a burst of waiters, etcd's client creates a Client's watches one
// after the other on one gRPC stream, and a waiter's watch could take
// longer than its TTL to start (bench, section queue, 10,000 waiters:
// creation p99 12–35 s). A lease that lapsed meanwhile would take its
// entry with it: the waiter behind would wake and watch again at the back
// of the line, where the same would happen to it, and the queue would
// drain a few hundred of 10,000 in 30 s (docs/etcd.md). Here the waiter's
// watch is held until etcd shows its lease renewed, or gone: with renewals
// set up after the created response, the lease lapses while the watch is
// held and the test fails at "lapsed".
func TestWait_renewsWhileWatchStarts(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "waitrenew/" + t.Name()
	dir := etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key)
	holder := openClient(t, ctx, srv.URL())
	held, err := holder.Lock(ctx, key, longTTL)
	if err != nil {
		t.Fatal(err)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	w := &heldWatcher{Watcher: clientv3.NewWatcher(cli), prefix: dir, held: make(chan string, 1), release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(w.release)
		}
	}()
	waiter, err := etcddlock.NewWrappedForTest(ctx, cli, nil, w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })

	type result struct {
		l   *dlock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Lock(ctx, key, dlock.WithTTL(waitRenewTTL))
		got <- result{l, err}
	}()
	var pred string
	select {
	case pred = <-w.held:
	case <-ctx.Done():
		t.Fatal("the waiter did not start a watch (watchdog)")
	}
	if !strings.HasPrefix(pred, dir) {
		t.Fatalf("held watch of %q, not under %q", pred, dir)
	}
	// The waiter's entry: the newest of the queue, not the holder's.
	resp, err := admin.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 2 || string(resp.Kvs[1].Key) != pred {
		t.Fatalf("queue %v: want the holder's entry %q and the waiter's", resp.Kvs, pred)
	}
	entry := resp.Kvs[0]
	lease := clientv3.LeaseID(entry.Lease)

	// Poll the lease's remaining TTL (whole seconds) until it goes up, a
	// renewal, or the lease is gone. Bounded by the lease itself: one
	// that nobody renews is gone after its TTL.
	lowest := int64(-1)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for renewed := false; !renewed; {
		ttl, err := admin.TimeToLive(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ttl.TTL <= 0:
			t.Fatalf("the waiter's lease lapsed while its watch was starting (TTL %v): it renews only once the watch has started", waitRenewTTL)
		case lowest >= 0 && ttl.TTL > lowest:
			renewed = true
		case lowest < 0 || ttl.TTL < lowest:
			lowest = ttl.TTL
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("watchdog")
		}
	}

	// Let the watch start; the holder's release grants the waiter its
	// first entry: it never lost its place.
	close(w.release)
	released = true
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter was not granted (watchdog)")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Token() != uint64(entry.CreateRevision) {
		t.Errorf("granted with token %d, want %d, its entry's create revision: it queued again", r.l.Token(), entry.CreateRevision)
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

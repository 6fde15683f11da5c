package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
)

// TestSemaphore_release_wakesOnlyTheFirstWaiters: a semaphore of 2
// permits, held, with 6 waiters each on its own session. Each of the first
// 2 waiters watches both holders; each later one the 3 entries nearest
// ahead of it. A release notifies the first 2 waiters (one is granted,
// without a request; the other watches the new holder if it did not),
// which are also those that watch the released entry as one of their
// nearest; one of them may list the queue once, at its promotion, when it
// joined behind more than 5 entries. The waiters 2 or more places behind
// the granted one hear nothing and send nothing, whatever the length of
// the queue.
func TestSemaphore_release_wakesOnlyTheFirstWaiters(t *testing.T) {
	ctx := testCtx(t)
	const key, limit, n = "sem-herd", 2, 6
	srv, opts, insp, held := heldSemaphore(t, ctx, key, limit)
	ws := make([]*watcher, n)
	ps := make([]*pendingAcquire, n)
	for i := range ws {
		ws[i] = newWatcher(t, ctx, srv.Addr(), fmt.Sprintf("w%d", i), opts)
		ps[i] = startAcquire(ctx, ws[i].c.Semaphore(key, limit).Acquire)
		waitWaiters(t, ctx, insp, key, i+1)
		want := int64(limit + 1) // the entries nearest ahead
		if i < limit {
			want = limit // every holder
		}
		never := make(chan struct{})
		awaitOrFail(t, ctx, fmt.Sprintf("%s watches %d nodes", ws[i].name, want), func() bool { return ws[i].watches() == want },
			func() { waitWaiters(t, ctx, insp, key, i+1) }, never)
	}
	for i := range ws {
		before := make([]counts, n)
		for j, w := range ws {
			before[j] = w.counts()
		}
		mustUnlock(t, ctx, held[0])
		held = append(held[1:], ps[i].lease(t, ctx, ws[i].name))
		for _, w := range ws[i:] {
			w.settle(t)
		}
		if d := ws[i].events.Load() - before[i].events; d != 1 {
			t.Errorf("release %d: the first waiter %s got %d notifications, want 1 (the release)", i, ws[i].name, d)
		}
		if d := ws[i].hook.requests.Load() - before[i].requests; d != 0 {
			t.Errorf("release %d: the first waiter %s sent %d requests to take the permit, want 0", i, ws[i].name, d)
		}
		for j := i + 1; j < n; j++ {
			d := ws[j].events.Load() - before[j].events
			lists := ws[j].hook.lists.Load() - before[j].lists
			switch {
			case j < i+limit && d != 1:
				t.Errorf("release %d: the waiter %s got %d notifications, want 1", i, ws[j].name, d)
			case j < i+limit && lists > 1:
				t.Errorf("release %d: the waiter %s listed the queue %d times, want at most 1", i, ws[j].name, lists)
			case j >= i+limit && (d != 0 || ws[j].hook.requests.Load() != before[j].requests):
				t.Errorf("release %d woke %s too: %d notifications, %d requests", i, ws[j].name, d, ws[j].hook.requests.Load()-before[j].requests)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	for _, l := range held {
		mustUnlock(t, ctx, l)
	}
}

// TestSemaphore_releasesTogether_takenTogether: a semaphore of 3 permits,
// held, and 4 waiters, each on its own session. Two holders release one
// after the other, before anybody is granted: the first two waiters are
// granted, each on the events of its own watches, without listing the
// queue (neither waits for the other's grant or notice), and the other two
// still wait.
func TestSemaphore_releasesTogether_takenTogether(t *testing.T) {
	ctx := testCtx(t)
	const key, limit, n = "sem-together", 3, 4
	srv, opts, insp, held := heldSemaphore(t, ctx, key, limit)
	ws := make([]*watcher, n)
	ps := make([]*pendingAcquire, n)
	for i := range ws {
		ws[i] = newWatcher(t, ctx, srv.Addr(), fmt.Sprintf("w%d", i), opts)
		ps[i] = startAcquire(ctx, ws[i].c.Semaphore(key, limit).Acquire)
		waitWaiters(t, ctx, insp, key, i+1)
	}
	for i, w := range ws {
		// Each has set its watches (or, the later ones, its listing
		// shows it is not one of the first limit waiters).
		never := make(chan struct{})
		awaitOrFail(t, ctx, w.name+" watches", func() bool { return w.watches() >= 1 },
			func() { waitWaiters(t, ctx, insp, key, n) }, never)
		_ = i
	}
	before := make([]counts, n)
	for j, w := range ws {
		before[j] = w.counts()
	}
	mustUnlock(t, ctx, held[0])
	mustUnlock(t, ctx, held[1])
	for i := range 2 {
		held = append(held, ps[i].lease(t, ctx, ws[i].name))
		if d := ws[i].hook.lists.Load() - before[i].lists; d != 0 {
			t.Errorf("%s listed the queue %d times to take its permit, want 0", ws[i].name, d)
		}
	}
	info := waitWaiters(t, ctx, insp, key, 2)
	if len(info.Holders) != limit {
		t.Errorf("holders %d, want %d", len(info.Holders), limit)
	}
	for _, p := range ps[2:] {
		if p.returned() {
			t.Errorf("a later waiter returned: %v", p.err)
		}
	}
	for _, l := range held[2:] {
		mustUnlock(t, ctx, l)
	}
	for i := 2; i < n; i++ {
		mustUnlock(t, ctx, ps[i].lease(t, ctx, ws[i].name))
	}
}

// TestSemaphore_waiterAheadLeaves_nextTakesTheFreedPermit: a semaphore of
// 2 permits, held; three waiters. The first gives up; then a holder
// releases: the second waiter, which counted the one that left among the
// entries ahead of it, finds it gone and is granted, and the third still
// waits (never more holders than permits, and no waiter passes another).
func TestSemaphore_waiterAheadLeaves_nextTakesTheFreedPermit(t *testing.T) {
	ctx := testCtx(t)
	const key, limit = "sem-leaves", 2
	srv, opts, insp, held := heldSemaphore(t, ctx, key, limit)
	ws := make([]*watcher, 3)
	ps := make([]*pendingAcquire, 3)
	wctx, cancel := context.WithCancel(ctx)
	for i := range ws {
		ws[i] = newWatcher(t, ctx, srv.Addr(), fmt.Sprintf("w%d", i), opts)
		c := ctx
		if i == 0 {
			c = wctx
		}
		ps[i] = startAcquire(c, ws[i].c.Semaphore(key, limit).Acquire)
		waitWaiters(t, ctx, insp, key, i+1)
	}
	never := make(chan struct{})
	awaitOrFail(t, ctx, "w1 watches the holders", func() bool { return ws[1].watches() == limit },
		func() { waitWaiters(t, ctx, insp, key, 3) }, never)
	cancel()
	<-ps[0].done
	if !errors.Is(ps[0].err, context.Canceled) {
		t.Fatalf("w0: %v, want context.Canceled", ps[0].err)
	}
	waitWaiters(t, ctx, insp, key, 2)
	mustUnlock(t, ctx, held[0])
	l := ps[1].lease(t, ctx, "w1")
	info := waitWaiters(t, ctx, insp, key, 1)
	if len(info.Holders) != limit {
		t.Errorf("holders %d, want %d", len(info.Holders), limit)
	}
	if ps[2].returned() {
		t.Errorf("w2 returned while both permits were held: %v", ps[2].err)
	}
	mustUnlock(t, ctx, held[1])
	mustUnlock(t, ctx, ps[2].lease(t, ctx, "w2"))
	mustUnlock(t, ctx, l)
}

// TestRWMutex_release_wakesOnlyTheGrantable: a writer holds; three
// readers, a writer and two readers wait, each on its own session. The
// writer's release wakes the three readers, which are granted together
// without a request, and nobody else; the readers' releases wake nobody
// until the last, which wakes the writer; the writer's release wakes the
// last two readers.
func TestRWMutex_release_wakesOnlyTheGrantable(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	const key = "rw-herd"
	insp := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	w0, err := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts).RWMutex(key).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shape := "sssxss"
	ws := make([]*watcher, len(shape))
	ps := make([]*pendingAcquire, len(shape))
	for i := range ws {
		ws[i] = newWatcher(t, ctx, srv.Addr(), fmt.Sprintf("%c%d", shape[i], i), opts)
		m := ws[i].c.RWMutex(key)
		f := m.RLock
		if shape[i] == 'x' {
			f = m.Lock
		}
		ps[i] = startAcquire(ctx, f)
		waitWaiters(t, ctx, insp, key, i+1)
		never := make(chan struct{})
		awaitOrFail(t, ctx, ws[i].name+" watches", func() bool { return ws[i].watches() == 1 },
			func() { waitWaiters(t, ctx, insp, key, i+1) }, never)
	}
	// release releases l and checks that exactly the waiters in woken got
	// one notification each, the others none, and that the grants are
	// those in granted; the granted that were woken took the key without
	// a request when free is set.
	done := make([]bool, len(ws)) // released: their own watches fire too
	release := func(step string, self int, woken, granted []int, free bool) {
		t.Helper()
		before := make([]counts, len(ws))
		for j, w := range ws {
			before[j] = w.counts()
		}
		if self < 0 {
			mustUnlock(t, ctx, w0)
		} else {
			mustUnlock(t, ctx, ps[self].l)
			done[self] = true
		}
		for _, g := range granted {
			ps[g].lease(t, ctx, ws[g].name)
		}
		for _, w := range ws {
			w.settle(t)
		}
		for j, w := range ws {
			want := int64(0)
			for _, k := range woken {
				if k == j {
					want = 1
				}
			}
			if d := w.events.Load() - before[j].events; d != want && !done[j] {
				t.Errorf("%s: %s got %d notifications, want %d", step, w.name, d, want)
			}
		}
		for _, g := range granted {
			if d := ws[g].hook.requests.Load() - before[g].requests; free && d != 0 {
				t.Errorf("%s: %s sent %d requests to take the key, want none", step, ws[g].name, d)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	release("the writer's release", -1, []int{0, 1, 2}, []int{0, 1, 2}, true)
	release("the first reader's release", 0, nil, nil, false)
	release("the second reader's release", 1, nil, nil, false)
	release("the third reader's release", 2, []int{3}, []int{3}, false)
	release("the second writer's release", 3, []int{4, 5}, []int{4, 5}, true)
	mustUnlock(t, ctx, ps[4].l)
	mustUnlock(t, ctx, ps[5].l)
}

// TestSemaphore_firstWaiterNodeDeleted_queuesAgain: a semaphore of 2
// permits, held; one waiter, watching the holders. An operator deletes the
// waiter's node: its own watch fires, it lists, finds its node gone and
// queues again (one node), still waiting; a release then grants it.
func TestSemaphore_firstWaiterNodeDeleted_queuesAgain(t *testing.T) {
	ctx := testCtx(t)
	const key, limit = "sem-deleted", 2
	srv, opts, insp, held := heldSemaphore(t, ctx, key, limit)
	root := opts.Root
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})
	w := newWatcher(t, ctx, srv.Addr(), "w", opts)
	p := startAcquire(ctx, w.c.Semaphore(key, limit).Acquire)
	waitWaiters(t, ctx, insp, key, 1)
	never := make(chan struct{})
	awaitOrFail(t, ctx, "w watches the holders", func() bool { return w.watches() == limit },
		func() { waitWaiters(t, ctx, insp, key, 1) }, never)
	keyPath := root + "/" + key
	names := children(t, admin, keyPath)
	if len(names) != limit+1 {
		t.Fatalf("children %v, want %d", names, limit+1)
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
	creates := w.hook.creates.Load()
	if err := admin.Delete(keyPath+"/"+names[limit], -1); err != nil {
		t.Fatal(err)
	}
	awaitOrFail(t, ctx, "w queues again", func() bool { return w.hook.creates.Load() > creates },
		func() { waitWaiters(t, ctx, insp, key, 1) }, p.done)
	waitWaiters(t, ctx, insp, key, 1)
	if p.returned() {
		t.Fatalf("w returned while both permits were held: %v", p.err)
	}
	mustUnlock(t, ctx, held[0])
	l := p.lease(t, ctx, "w")
	if info := waitWaiters(t, ctx, insp, key, 0); len(info.Holders) != limit {
		t.Errorf("holders %d, want %d", len(info.Holders), limit)
	}
	mustUnlock(t, ctx, l)
	mustUnlock(t, ctx, held[1])
}

// heldSemaphore starts the scenarios of this file: a semaphore of limit
// permits on key, every permit held by a client on its own session, and a
// client to inspect the queue with.
func heldSemaphore(t *testing.T, ctx context.Context, key string, limit int) (*testserver.ZooKeeper, zkdlock.Options, *dlock.Client, []*dlock.Lease) {
	t.Helper()
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	insp := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	held := make([]*dlock.Lease, 0, limit)
	for range limit {
		l, err := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts).Semaphore(key, limit).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	return srv, opts, insp, held
}

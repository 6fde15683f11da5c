package zkdlock_test

import (
	"fmt"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
)

// TestSemaphore_release_wakesTheFirstWaiterAndTheNext: a semaphore of 2
// permits, held, with 6 waiters each on its own session. Each release
// wakes the first waiter (its child watch), which is granted, and, through
// the notice the granted waiter writes to its node, the waiter behind it,
// which becomes the first waiter: two notifications, whatever the length
// of the queue. No other waiter is notified or lists the queue.
func TestSemaphore_release_wakesTheFirstWaiterAndTheNext(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	const key, limit, n = "sem-herd", 2, 6
	insp := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	var held []*dlock.Lease
	for range limit {
		l, err := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts).Semaphore(key, limit).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	ws := make([]*watcher, n)
	ps := make([]*pendingAcquire, n)
	for i := range ws {
		ws[i] = newWatcher(t, ctx, srv.Addr(), fmt.Sprintf("w%d", i), opts)
		ps[i] = startAcquire(ctx, ws[i].c.Semaphore(key, limit).Acquire)
		waitWaiters(t, ctx, insp, key, i+1)
		never := make(chan struct{})
		awaitOrFail(t, ctx, ws[i].name+" watches", func() bool { return ws[i].watches() == 1 },
			func() { waitWaiters(t, ctx, insp, key, i+1) }, never)
	}
	for i := range ws {
		before := make([]counts, n)
		for j, w := range ws {
			before[j] = w.counts()
		}
		mustUnlock(t, ctx, held[0])
		held = append(held[1:], ps[i].lease(t, ctx, ws[i].name))
		// The granted waiter writes its notice after its grant returns;
		// CheckHeld waits for it.
		if _, err := zkdlock.CheckHeld(held[len(held)-1]); err != nil {
			t.Fatal(err)
		}
		for _, w := range ws[i+1:] {
			w.settle(t)
		}
		if d := ws[i].events.Load() - before[i].events; d != 1 {
			t.Errorf("release %d: the first waiter %s got %d notifications, want 1", i, ws[i].name, d)
		}
		for j := i + 1; j < n; j++ {
			d := ws[j].events.Load() - before[j].events
			switch {
			case j == i+1 && d != 1:
				t.Errorf("release %d: the next waiter %s got %d notifications, want 1 (the notice)", i, ws[j].name, d)
			case j > i+1 && d != 0:
				t.Errorf("release %d woke %s too: %d notifications", i, ws[j].name, d)
			case j > i+1 && ws[j].hook.lists.Load() != before[j].lists:
				t.Errorf("release %d: %s listed the queue (herd)", i, ws[j].name)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		if i+1 < n {
			// The next waiter is the first now, once its child watch is set.
			never := make(chan struct{})
			awaitOrFail(t, ctx, ws[i+1].name+" watches the children", func() bool { return ws[i+1].hook.childWs.Load() == 1 },
				func() { waitWaiters(t, ctx, insp, key, n-i-1) }, never)
		}
	}
	for _, l := range held {
		mustUnlock(t, ctx, l)
	}
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

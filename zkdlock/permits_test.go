package zkdlock_test

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// reads counts the requests of h that write nothing: listings, watches,
// reads and session proofs.
func reads(h *hookConn) int64 { return h.requests.Load() - h.multis.Load() - h.deletes.Load() }

// TestSemaphore_handOff_noRequest: a semaphore of 2 permits, held by
// entries that never wrote a notice (granted with nobody behind), and one
// waiter watching both. A release grants the waiter with no request
// between the release and the grant: the permit's release is a plain
// delete, which the waiter counts as its departure. (A release that wrote
// the node first made the waiter read it again, to tell the release from
// a notice.)
func TestSemaphore_handOff_noRequest(t *testing.T) {
	ctx := testCtx(t)
	const key, limit = "sem-handoff", 2
	srv, opts, insp, held := heldSemaphore(t, ctx, key, limit)
	w := newWatcher(t, ctx, srv.Addr(), "w0", opts)
	p := startAcquire(ctx, w.c.Semaphore(key, limit).Acquire)
	waitWaiters(t, ctx, insp, key, 1)
	never := make(chan struct{})
	awaitOrFail(t, ctx, "w0 watches the holders", func() bool { return w.watches() == limit },
		func() { waitWaiters(t, ctx, insp, key, 1) }, never)
	before := reads(w.hook.hookConn)
	mustUnlock(t, ctx, held[0])
	l := p.lease(t, ctx, "w0")
	if d := reads(w.hook.hookConn) - before; d != 0 {
		t.Errorf("w0 sent %d requests between the release and its grant, want 0", d)
	}
	mustUnlock(t, ctx, l)
	mustUnlock(t, ctx, held[1])
}

// TestSemaphore_departuresTogether_countedTogether: a semaphore of 2
// permits, held, and two waiters; w1 needs both holders to go. Both
// release while w1 is still setting its watches, so that both departures
// are waiting for it when it looks: it counts both and is granted with no
// request after its watches were answered (it does not set a watch on the
// next entry after the first departure, only to find the second).
func TestSemaphore_departuresTogether_countedTogether(t *testing.T) {
	ctx := testCtx(t)
	const key, limit = "sem-together2", 2
	srv, opts, insp, held := heldSemaphore(t, ctx, key, limit)
	ws := make([]*watcher, 2)
	ps := make([]*pendingAcquire, 2)
	for i := range ws {
		ws[i] = newWatcher(t, ctx, srv.Addr(), fmt.Sprintf("w%d", i), opts)
	}
	// w1's watch on the second holder is answered, and then held back
	// until both holders have gone and w1's session has heard of both.
	holders, err := insp.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(holders.Holders) != limit {
		t.Fatalf("holders %d, want %d", len(holders.Holders), limit)
	}
	release := make(chan struct{})
	var answered atomic.Int32
	after := func(path string) {
		if answered.Add(1) == limit {
			<-release
		}
	}
	ps[0] = startAcquire(ctx, ws[0].c.Semaphore(key, limit).Acquire)
	waitWaiters(t, ctx, insp, key, 1)
	ws[1].hook.afterGetW.Store(&after)
	ps[1] = startAcquire(ctx, ws[1].c.Semaphore(key, limit).Acquire)
	never := make(chan struct{})
	awaitOrFail(t, ctx, "w1 watches the holders", func() bool { return answered.Load() == limit },
		func() { waitWaiters(t, ctx, insp, key, 2) }, never)
	events := ws[1].events.Load()
	mustUnlock(t, ctx, held[0])
	mustUnlock(t, ctx, held[1])
	awaitOrFail(t, ctx, "w1 hears of both departures", func() bool { return ws[1].events.Load() == events+limit },
		func() { ws[1].settle(t) }, never)
	before := reads(ws[1].hook.hookConn)
	close(release)
	l1 := ps[1].lease(t, ctx, "w1")
	if d := reads(ws[1].hook.hookConn) - before; d != 0 {
		t.Errorf("w1 sent %d requests after its watches were answered, want 0", d)
	}
	mustUnlock(t, ctx, l1)
	mustUnlock(t, ctx, ps[0].lease(t, ctx, "w0"))
}

// TestSemaphore_laterWaiter_promotedWithoutListing: a semaphore of 2
// permits, held (h0, h1), two first waiters (w0, w1) and a later waiter W,
// which watches the 3 entries nearest ahead of it (h1, w0, w1). h0's
// release grants w0 and does not reach W. h1's release grants w1 and
// promotes W to the first waiters: W probes the one entry it kept and does
// not watch (h0, gone) and lists nothing. w0's release then grants W with
// no request between the release and the grant. Pinned: the old code's W
// watched only w0, for the grant notice w0 writes after h0's release, and
// listed the queue on it ("h0's release reached the later waiter: 1
// notifications, 1 requests", with the first wait relaxed to its one
// watch).
func TestSemaphore_laterWaiter_promotedWithoutListing(t *testing.T) {
	ctx := testCtx(t)
	const key, limit = "sem-promote", 2
	srv, opts, insp, held := heldSemaphore(t, ctx, key, limit)
	ws := make([]*watcher, 3)
	ps := make([]*pendingAcquire, len(ws))
	never := make(chan struct{})
	for i := range ws {
		ws[i] = newWatcher(t, ctx, srv.Addr(), fmt.Sprintf("w%d", i), opts)
		ps[i] = startAcquire(ctx, ws[i].c.Semaphore(key, limit).Acquire)
		waitWaiters(t, ctx, insp, key, i+1)
	}
	w := ws[2]
	awaitOrFail(t, ctx, "the later waiter watches the entries nearest ahead", func() bool { return w.watches() >= limit+1 },
		func() { waitWaiters(t, ctx, insp, key, 3) }, never)
	w.settle(t)
	start := w.counts()

	mustUnlock(t, ctx, held[0])
	l0 := ps[0].lease(t, ctx, "w0")
	w.settle(t)
	if c := w.counts(); c != start {
		t.Fatalf("h0's release reached the later waiter: %d notifications, %d requests", c.events-start.events, c.requests-start.requests)
	}

	mustUnlock(t, ctx, held[1])
	l1 := ps[1].lease(t, ctx, "w1")
	awaitOrFail(t, ctx, "the promoted waiter probes h0", func() bool { return w.hook.requests.Load() > start.requests },
		func() { waitWaiters(t, ctx, insp, key, 1) }, ps[2].done)
	w.settle(t)
	promoted := w.counts()
	if d := promoted.lists - start.lists; d != 0 {
		t.Errorf("the promoted waiter listed the queue %d times, want 0", d)
	}
	if d := promoted.requests - start.requests; d != 1 {
		t.Errorf("the promoted waiter sent %d requests, want 1 (the probe of h0)", d)
	}

	mustUnlock(t, ctx, l0)
	lw := ps[2].lease(t, ctx, "the promoted waiter")
	if d := w.hook.requests.Load() - promoted.requests; d != 0 {
		t.Errorf("the promoted waiter sent %d requests between the release and its grant, want 0", d)
	}
	mustUnlock(t, ctx, l1)
	mustUnlock(t, ctx, lw)
}

package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/zkdlock"
)

// TestSemaphore_saturated_everyPermitInUse: with more contenders than
// permits, all of them are in use (a semaphore that hands out one permit at
// a time is wrong), in arrival order, and each release grants exactly one
// more.
func TestSemaphore_saturated_everyPermitInUse(t *testing.T) {
	ctx := testCtx(t)
	srv, _, opts := sharedServer(t, ctx)
	const key, limit, n = "sem-saturated", 3, 6
	insp := plainClient(t, ctx, srv.Addr(), opts)
	ps := make([]*pendingAcquire, n)
	for i := range ps {
		ps[i] = startAcquire(ctx, plainClient(t, ctx, srv.Addr(), opts).Semaphore(key, limit).Acquire)
		waitEntries(t, ctx, insp, key, i+1)
	}
	var prev uint64
	for i := range limit {
		l := ps[i].lease(t, ctx, fmt.Sprintf("permit %d", i))
		if l.Token() <= prev {
			t.Errorf("permit %d: token %d after %d", i, l.Token(), prev)
		}
		prev = l.Token()
	}
	info := waitWaiters(t, ctx, insp, key, n-limit)
	if info.Kind != dlock.KindSemaphore || info.Limit != limit || len(info.Holders) != limit {
		t.Fatalf("Inspect: kind %v limit %d, %d holders; want a semaphore of %d, all held", info.Kind, info.Limit, len(info.Holders), limit)
	}
	for i, h := range info.Holders {
		if h.Mode != dlock.Shared || h.Token != ps[i].l.Token() {
			t.Errorf("holder %d: %+v, want shared with token %d (grant order)", i, h, ps[i].l.Token())
		}
	}
	for i := limit; i < n; i++ {
		if ps[i].returned() {
			t.Fatalf("contender %d granted beyond the limit (err %v)", i, ps[i].err)
		}
	}
	for i := limit; i < n; i++ {
		mustUnlock(t, ctx, ps[i-limit].l)
		l := ps[i].lease(t, ctx, fmt.Sprintf("contender %d after a release", i))
		if l.Token() <= prev {
			t.Errorf("contender %d: token %d after %d", i, l.Token(), prev)
		}
		prev = l.Token()
		for j := i + 1; j < n; j++ {
			if ps[j].returned() {
				t.Fatalf("one release granted contender %d too", j)
			}
		}
	}
	for i := n - limit; i < n; i++ {
		mustUnlock(t, ctx, ps[i].l)
	}
}

// waitEntries waits until Inspect shows n holders and waiters on key.
func waitEntries(t *testing.T, ctx context.Context, c *dlock.Client, key string, n int) {
	t.Helper()
	for {
		info, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Holders)+len(info.Waiters) == n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("key %q: %d entries, want %d (watchdog)", key, len(info.Holders)+len(info.Waiters), n)
		}
	}
}

// TestRWMutex_FIFO: a reader that comes after a waiting writer waits
// behind it (no writer starvation), consecutive readers at the head are
// granted together, and tokens follow grant order in every mode.
func TestRWMutex_FIFO(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	const key = "rw-fifo"
	insp := plainClient(t, ctx, srv.Addr(), opts)
	rw := func() *dlock.RWMutex { return plainClient(t, ctx, srv.Addr(), opts).RWMutex(key) }
	w1, err := rw().Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r1 := startAcquire(ctx, rw().RLock)
	waitWaiters(t, ctx, insp, key, 1)
	w2 := startAcquire(ctx, rw().Lock)
	waitWaiters(t, ctx, insp, key, 2)
	r2 := startAcquire(ctx, rw().RLock)
	waitWaiters(t, ctx, insp, key, 3)
	r3 := startAcquire(ctx, rw().RLock)
	info := waitWaiters(t, ctx, insp, key, 4)
	if info.Kind != dlock.KindRWMutex || info.Limit != 0 {
		t.Errorf("Inspect: kind %v limit %d, want a read-write lock", info.Kind, info.Limit)
	}
	if got := modes(info.Holders) + "|" + modes(info.Waiters); got != "x|sxss" {
		t.Errorf("Inspect: holders|waiters %s, want x|sxss", got)
	}

	mustUnlock(t, ctx, w1)
	l1 := r1.lease(t, ctx, "the first reader")
	info = waitWaiters(t, ctx, insp, key, 3)
	if w2.returned() || r2.returned() || r3.returned() {
		t.Fatal("a writer or a reader behind the waiting writer was granted with a reader holding")
	}
	if got := modes(info.Holders) + "|" + modes(info.Waiters); got != "s|xss" {
		t.Errorf("Inspect: holders|waiters %s, want s|xss", got)
	}
	if _, err := insp.RWMutex(key).TryRLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("TryRLock behind a waiting writer: %v, want ErrLocked", err)
	}
	mustUnlock(t, ctx, l1)
	lw2 := w2.lease(t, ctx, "the waiting writer")
	waitWaiters(t, ctx, insp, key, 2)
	if r2.returned() || r3.returned() {
		t.Fatal("a reader was granted with the writer holding")
	}
	mustUnlock(t, ctx, lw2)
	l2 := r2.lease(t, ctx, "the second reader")
	l3 := r3.lease(t, ctx, "the third reader")
	info = waitWaiters(t, ctx, insp, key, 0)
	if len(info.Holders) != 2 || info.Holders[0].Token != l2.Token() || info.Holders[1].Token != l3.Token() {
		t.Errorf("Inspect: holders %+v, want the two readers in grant order", info.Holders)
	}
	for i, tok := range []uint64{w1.Token(), l1.Token(), lw2.Token(), l2.Token(), l3.Token()} {
		if i > 0 && tok <= []uint64{w1.Token(), l1.Token(), lw2.Token(), l2.Token()}[i-1] {
			t.Errorf("grant %d: token %d not above the one before", i, tok)
		}
	}
	mustUnlock(t, ctx, l2)
	mustUnlock(t, ctx, l3)
	checkNothingLeft(t, admin, zkdlock.KeyPathForTest(opts.Root, key))
}

// modes writes x for Exclusive and s for Shared entries.
func modes(es []dlock.Entry) string {
	var b strings.Builder
	for _, e := range es {
		if e.Mode == dlock.Shared {
			b.WriteByte('s')
		} else {
			b.WriteByte('x')
		}
	}
	return b.String()
}

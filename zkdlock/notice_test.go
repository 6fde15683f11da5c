package zkdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock/zkdlock"
)

// TestSemaphore_grantReturnsBeforeItsNotice: a semaphore's first waiter,
// granted with a waiter behind it, returns its grant before its grant
// notice is answered: the notice is off the hand-off path. The notice still
// lands (data version 1, which the grant's check expects), the grant does
// not take its own write for a loss, and the waiter behind, told by it, is
// granted at the next release. Pinned: the notice was written before the
// grant returned, so the grant waited for the held reply (the wait below
// ended at its watchdog).
func TestSemaphore_grantReturnsBeforeItsNotice(t *testing.T) {
	e := newFenceEnv(t)
	const key = "pool"
	insp := e.client(t)
	p1, err := insp.Semaphore(key, 1).Acquire(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{}) // closed to let the notice's reply through
	hook := &hookConn{Conn: dialZK(t, e.ctx, e.addr, connOpts{})}
	noticed := make(chan struct{}, 1)
	hook.onSetData = func(path string, err error) bool {
		select {
		case noticed <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		case <-e.ctx.Done():
		}
		return false
	}
	c := newClient(t, e.ctx, hook, e.opts)
	var once bool
	release := func() {
		if !once {
			once = true
			close(hold)
		}
	}
	t.Cleanup(release) // before the clients close
	w1 := startAcquire(e.ctx, c.Semaphore(key, 1).Acquire)
	waitWaiters(t, e.ctx, insp, key, 1)
	w2 := startAcquire(e.ctx, e.client(t).Semaphore(key, 1).Acquire)
	waitWaiters(t, e.ctx, insp, key, 2)

	mustUnlock(t, e.ctx, p1)
	wctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	l1 := w1.lease(t, wctx, "the first waiter, its notice's reply held")
	select {
	case <-noticed:
	case <-e.ctx.Done():
		t.Fatal("the granted waiter wrote no notice (watchdog)")
	}
	release()
	check, err := zkdlock.CheckHeld(l1)
	if err != nil {
		t.Fatal(err)
	}
	if _, stat, err := e.admin.Exists(check.Path); err != nil || stat.Version != 1 || check.Version != 1 {
		t.Fatalf("the permit's node: version %v (err %v), its check expects %d; want 1 (its notice)", stat.Version, err, check.Version)
	}
	e.hold(t, l1, "l1")
	if err := l1.Err(); err != nil {
		t.Fatalf("the permit took its own notice for a loss: %v", err)
	}
	mustUnlock(t, e.ctx, l1)
	l2 := w2.lease(t, e.ctx, "the waiter behind, after the release")
	mustUnlock(t, e.ctx, l2)
}

package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// testDelay is the lock-delay of these tests: long enough that a grant
// that ignored it would come well before it ends.
const testDelay = 1500 * time.Millisecond

// marksOf returns the lock-delay marks under the key node.
func marksOf(t *testing.T, admin *zk.Conn, root, key string) []string {
	t.Helper()
	var out []string
	for _, c := range children(t, admin, zkdlock.KeyPathForTest(root, key)) {
		if strings.HasPrefix(c, "delay-") {
			out = append(out, c)
		}
	}
	return out
}

// TestLockDelay_revoke_nextGrantAfterTheDelay: a revoked holder with a
// lock-delay keeps the key from everyone for the delay: Inspect shows the
// ended entry as a holder with its LockDelay and a DelayedUntil in force,
// TryLock is refused, and the next Lock is granted no earlier than the
// delay after the revoke (a lower bound only), with a greater token; then
// nothing of the delay is left. On a standalone server and with the
// ensemble rule.
func TestLockDelay_revoke_nextGrantAfterTheDelay(t *testing.T) {
	for _, dep := range []zkdlock.Deployment{zkdlock.Detect, zkdlock.Ensemble} {
		t.Run(map[zkdlock.Deployment]string{zkdlock.Detect: "standalone", zkdlock.Ensemble: "ensemble"}[dep], func(t *testing.T) {
			ctx := testCtx(t)
			srv := testserver.SharedZooKeeper(t)
			admin := dialZK(t, ctx, srv.Addr(), connOpts{})
			root := testRoot(t)
			o := zkdlock.Options{Root: root, Deployment: dep}
			hc := plainClient(t, ctx, srv.Addr(), o)
			rv := plainClient(t, ctx, srv.Addr(), o)
			c := plainClient(t, ctx, srv.Addr(), o)
			const key = "job"

			h, err := hc.Lock(ctx, key, dlock.WithLockDelay(testDelay))
			if err != nil {
				t.Fatal(err)
			}
			info, err := rv.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Holders) != 1 || info.Holders[0].LockDelay != testDelay || !info.DelayedUntil.IsZero() {
				t.Fatalf("Inspect of the holder: %+v, DelayedUntil %v; want one holder with LockDelay %v and no delay in force", info.Holders, info.DelayedUntil, testDelay)
			}
			revokedAt := time.Now()
			revoked, err := rv.Revoke(ctx, key, dlock.RevokeToken(h.Token()))
			if err != nil {
				t.Fatal(err)
			}
			if len(revoked) != 1 || revoked[0].LockDelay != testDelay {
				t.Fatalf("Revoke returned %+v", revoked)
			}
			waitDone(t, ctx, h, "a revoke")
			if err := h.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("revoked holder's Unlock = %v, want ErrNotHeld", err)
			}

			info, err = rv.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Holders) != 1 || info.Holders[0].Token != h.Token() || info.Holders[0].LockDelay != testDelay || info.DelayedUntil.IsZero() {
				t.Fatalf("Inspect after the revoke: holders %+v, DelayedUntil %v; want the ended holder (token %d) and a delay in force", info.Holders, info.DelayedUntil, h.Token())
			}
			if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
				t.Fatalf("TryLock during the delay = %v, want ErrLocked", err)
			}

			l := mustLock(t, ctx, c, key)
			if waited := time.Since(revokedAt); waited < testDelay {
				t.Errorf("granted %v after the revoke, before the lock-delay of %v", waited, testDelay)
			}
			if l.Token() <= h.Token() {
				t.Errorf("next token %d, not above the revoked %d", l.Token(), h.Token())
			}
			info, err = rv.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !info.DelayedUntil.IsZero() || len(info.Holders) != 1 || info.Holders[0].Token != l.Token() {
				t.Errorf("Inspect after the grant: holders %+v, DelayedUntil %v", info.Holders, info.DelayedUntil)
			}
			mustUnlock(t, ctx, l)
			if m := marksOf(t, admin, root, key); len(m) != 0 {
				t.Errorf("marks left: %v", m)
			}
			if idx := indexOf(t, admin, root); len(idx) != 0 {
				t.Errorf("index entries left: %v", idx)
			}
		})
	}
}

// TestLockDelay_sessionEnds_waiterSitsItOut: the session of a holder with
// a lock-delay ends (its node goes with it, no release); the waiter behind
// is granted no earlier than the delay after the session was closed.
func TestLockDelay_sessionEnds_waiterSitsItOut(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	root := testRoot(t)
	o := zkdlock.Options{Root: root}
	hconn := dialZK(t, ctx, srv.Addr(), connOpts{})
	hc := newClient(t, ctx, hconn, o)
	c := plainClient(t, ctx, srv.Addr(), o)
	const key = "job"

	if _, err := hc.Lock(ctx, key, dlock.WithLockDelay(testDelay)); err != nil {
		t.Fatal(err)
	}
	w := startAcquire(ctx, func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error) { return c.Lock(ctx, key) })
	waitWaiters(t, ctx, c, key, 1)
	ended := time.Now()
	hconn.Close()
	l := w.lease(t, ctx, "the waiter")
	if waited := time.Since(ended); waited < testDelay {
		t.Errorf("granted %v after the holder's session was closed, before the lock-delay of %v", waited, testDelay)
	}
	mustUnlock(t, ctx, l)
}

// TestLockDelay_granteeDiesSittingOut_nextKeepsItsCount: a waiter sitting
// out an ended holder's lock-delay writes when the delay ends into the
// mark, and dies; once that time has passed, another Client's TryLock is
// granted (it deletes the mark) rather than counting the whole delay again
// from its own sight of the mark; the grant is still no earlier than the
// delay after the holder's session ended.
func TestLockDelay_granteeDiesSittingOut_nextKeepsItsCount(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	root := testRoot(t)
	o := zkdlock.Options{Root: root}
	hconn := dialZK(t, ctx, srv.Addr(), connOpts{})
	hc := newClient(t, ctx, hconn, o)
	w1conn := dialZK(t, ctx, srv.Addr(), connOpts{})
	c1 := newClient(t, ctx, w1conn, o)
	c2 := plainClient(t, ctx, srv.Addr(), o)
	const key = "job"

	if _, err := hc.Lock(ctx, key, dlock.WithLockDelay(testDelay)); err != nil {
		t.Fatal(err)
	}
	// The first waiter's Lock, on a closed connection, would try until
	// its ctx ends (ErrUnavailable): the test ends it.
	w1ctx, stopW1 := context.WithCancel(ctx)
	defer stopW1()
	w1 := startAcquire(w1ctx, func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error) { return c1.Lock(ctx, key) })
	waitWaiters(t, ctx, c2, key, 1)
	ended := time.Now()
	hconn.Close()

	// The first waiter writes when the delay ends into the mark as it
	// starts sitting it out ("until=…").
	m := marksOf(t, admin, root, key)
	if len(m) != 1 {
		t.Fatalf("marks %v, want the holder's", m)
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var until time.Time
	for {
		data, _, err := admin.Get(zkdlock.KeyPathForTest(root, key) + "/" + m[0])
		if err != nil {
			t.Fatalf("read the mark: %v", err)
		}
		if ms, ok := strings.CutPrefix(string(data), "until="); ok {
			line, _, _ := strings.Cut(ms, "\n")
			n, err := strconv.ParseInt(line, 10, 64)
			if err != nil {
				t.Fatalf("mark data %q", data)
			}
			until = time.UnixMilli(n)
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the first waiter never sat out the delay (watchdog)")
		}
	}
	w1conn.Close()
	stopW1()
	<-w1.done
	if w1.err == nil {
		t.Errorf("the dead waiter was granted")
	}
	if m := marksOf(t, admin, root, key); len(m) != 1 {
		t.Fatalf("marks %v once the first waiter died, want the holder's", m)
	}
	// Wait for the time written in the mark (the delay as the dead
	// waiter counted it) to pass.
	waitPast(t, ctx, until)
	l, err := c2.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock once the delay written in the mark is over = %v, want a grant", err)
	}
	if waited := time.Since(ended); waited < testDelay {
		t.Errorf("granted %v after the holder's session was closed, before the lock-delay of %v", waited, testDelay)
	}
	mustUnlock(t, ctx, l)
	if m := marksOf(t, admin, root, key); len(m) != 0 {
		t.Errorf("marks left: %v", m)
	}
}

// awaitWatched calls look until it reports done, each time again once the
// watch it set (changed) fires, for at most within; late names what did not
// happen in the failure.
func awaitWatched(t *testing.T, ctx context.Context, within time.Duration, look func() (done bool, changed <-chan zk.Event), late func() string) {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		done, changed := look()
		if done {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("%s after %v", late(), within)
		case <-ctx.Done():
			t.Fatal("watchdog")
		}
	}
}

// awaitNoMarks waits, at most within, until the key node has no mark (or
// is gone), woken by a child watch, and fails the test if one is left.
func awaitNoMarks(t *testing.T, ctx context.Context, admin *zk.Conn, root, key string, within time.Duration) {
	t.Helper()
	var left []string
	awaitWatched(t, ctx, within, func() (bool, <-chan zk.Event) {
		cs, _, ch, err := admin.ChildrenW(zkdlock.KeyPathForTest(root, key))
		if errors.Is(err, zk.ErrNoNode) {
			return true, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		left = left[:0]
		for _, c := range cs {
			if strings.HasPrefix(c, "delay-") {
				left = append(left, c)
			}
		}
		return len(left) == 0, ch
	}, func() string { return fmt.Sprintf("marks %v still there, want them gone once the delay is over", left) })
}

// TestLockDelay_keyNotLockedAgain_markGoes: the mark of a holder whose
// lease ended without a release goes once its delay is over though nobody
// locks the key again, deleted by a Client that saw the end: the revoked
// holder's own (its revoker closed at once), or one that only inspected
// the key once after the holder's session ended.
func TestLockDelay_keyNotLockedAgain_markGoes(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	root := testRoot(t)
	o := zkdlock.Options{Root: root}
	t.Run("revoked", func(t *testing.T) {
		const key = "revoked"
		hc := plainClient(t, ctx, srv.Addr(), o)
		h, err := hc.Lock(ctx, key, dlock.WithLockDelay(testDelay))
		if err != nil {
			t.Fatal(err)
		}
		rv := plainClient(t, ctx, srv.Addr(), o)
		if _, err := rv.Revoke(ctx, key); err != nil {
			t.Fatal(err)
		}
		if err := rv.Close(); err != nil {
			t.Fatal(err)
		}
		waitDone(t, ctx, h, "a revoke")
		awaitNoMarks(t, ctx, admin, root, key, testDelay+30*time.Second)
	})
	t.Run("inspectedOnce", func(t *testing.T) {
		const key = "inspected"
		hconn := dialZK(t, ctx, srv.Addr(), connOpts{})
		hc := newClient(t, ctx, hconn, o)
		if _, err := hc.Lock(ctx, key, dlock.WithLockDelay(testDelay)); err != nil {
			t.Fatal(err)
		}
		hconn.Close()
		c := plainClient(t, ctx, srv.Addr(), o)
		info, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.DelayedUntil.IsZero() || len(info.Holders) != 1 {
			t.Fatalf("Inspect once the holder's session ended: %+v, want the ended holder and a delay in force", info)
		}
		awaitNoMarks(t, ctx, admin, root, key, testDelay+30*time.Second)
	})
}

// TestLockDelay_release_startsNoDelay: a holder with a lock-delay that
// releases starts none: the waiter is granted, Inspect shows no delay, and
// the mark went with the node. A waiter with a delay that gives up leaves
// no mark either.
func TestLockDelay_release_startsNoDelay(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	root := testRoot(t)
	o := zkdlock.Options{Root: root}
	hc := plainClient(t, ctx, srv.Addr(), o)
	c := plainClient(t, ctx, srv.Addr(), o)
	const key = "job"

	h, err := hc.Lock(ctx, key, dlock.WithLockDelay(testDelay))
	if err != nil {
		t.Fatal(err)
	}
	// A waiter with a delay that gives up.
	gctx, cancel := context.WithCancel(ctx)
	gave := make(chan error, 1)
	go func() {
		_, err := hc.Lock(gctx, key, dlock.WithLockDelay(testDelay))
		gave <- err
	}()
	waitWaiters(t, ctx, c, key, 1)
	if m := marksOf(t, admin, root, key); len(m) != 2 {
		t.Fatalf("marks %v, want the holder's and the waiter's", m)
	}
	cancel()
	if err := <-gave; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if m := marksOf(t, admin, root, key); len(m) != 1 {
		t.Fatalf("marks after the waiter gave up: %v, want the holder's only", m)
	}
	if idx := indexOf(t, admin, root); len(idx) != 1 {
		t.Fatalf("index after the waiter gave up: %v, want the holder's entry only", idx)
	}

	w := startAcquire(ctx, func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error) { return c.Lock(ctx, key) })
	waitWaiters(t, ctx, c, key, 1)
	mustUnlock(t, ctx, h)
	l := w.lease(t, ctx, "the waiter")
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !info.DelayedUntil.IsZero() || len(info.Holders) != 1 || info.Holders[0].Token != l.Token() {
		t.Errorf("after a release: holders %+v, DelayedUntil %v; want the waiter, no delay", info.Holders, info.DelayedUntil)
	}
	if m := marksOf(t, admin, root, key); len(m) != 0 {
		t.Errorf("marks after the release: %v", m)
	}
	if idx := indexOf(t, admin, root); len(idx) != 0 {
		t.Errorf("index entries after the release: %v", idx)
	}
	mustUnlock(t, ctx, l)
}

// TestLockDelay_semaphore_revokedPermitStaysTaken: a revoked permit with a
// lock-delay stays taken for the delay (the other permit holds on); the
// waiter is granted no earlier than the delay after the revoke began.
func TestLockDelay_semaphore_revokedPermitStaysTaken(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	root := testRoot(t)
	o := zkdlock.Options{Root: root}
	rv := plainClient(t, ctx, srv.Addr(), o)
	c := plainClient(t, ctx, srv.Addr(), o)
	const key = "pool"
	sem := c.Semaphore(key, 2)

	a, err := sem.Acquire(ctx, dlock.WithLockDelay(testDelay))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := startAcquire(ctx, func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error) { return sem.Acquire(ctx) })
	waitWaiters(t, ctx, c, key, 1)
	began := time.Now()
	if _, err := rv.Revoke(ctx, key, dlock.RevokeToken(a.Token())); err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, a, "its revoke")
	l := w.lease(t, ctx, "the waiter")
	if waited := time.Since(began); waited < testDelay {
		t.Errorf("granted %v after the revoke began, before the lock-delay of %v", waited, testDelay)
	}
	select {
	case <-b.Done():
		t.Fatalf("the other permit was lost: %v", b.Err())
	default:
	}
	mustUnlock(t, ctx, b)
	mustUnlock(t, ctx, l)
}

// indexOf returns the entries of root's lock-delay index.
func indexOf(t *testing.T, admin *zk.Conn, root string) []string {
	t.Helper()
	return children(t, admin, zkdlock.DelayIndexForTest(root))
}

// waitPast waits until just after until by this process's clock: a delay
// written in a mark, which the test must see over.
func waitPast(t *testing.T, ctx context.Context, until time.Time) {
	t.Helper()
	timer := time.NewTimer(time.Until(until) + time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		t.Fatal("watchdog")
	}
}

// awaitMarkData waits until the mark at path holds a time its delay ends
// ("until=…"), woken by a data watch, and returns that time.
func awaitMarkData(t *testing.T, ctx context.Context, admin *zk.Conn, path string, within time.Duration) time.Time {
	t.Helper()
	var until time.Time
	awaitWatched(t, ctx, within, func() (bool, <-chan zk.Event) {
		data, _, ch, err := admin.GetW(path)
		if err != nil {
			t.Fatalf("read the mark: %v", err)
		}
		ms, ok := strings.CutPrefix(string(data), "until=")
		if !ok {
			return false, ch
		}
		line, _, _ := strings.Cut(ms, "\n")
		n, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			t.Fatalf("mark data %q", data)
		}
		until = time.UnixMilli(n)
		return true, ch
	}, func() string { return "nobody counted the delay of " + path })
	return until
}

// TestLockDelay_holderDiesKeyUntouched_sweepDeletesMark: the Client of a
// holder with a lock-delay dies (its session closed, no Unlock) and nobody
// locks or inspects the key again; another Client of the same root, which
// only sweeps the root's index of marks, counts the delay (Inspect shows
// it while in force) and deletes the mark, with its index entry, once the
// delay is over.
func TestLockDelay_holderDiesKeyUntouched_sweepDeletesMark(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	root := testRoot(t)
	hconn := dialZK(t, ctx, srv.Addr(), connOpts{})
	hc := newClient(t, ctx, hconn, zkdlock.Options{Root: root})
	// Opened by URL, whose lock_delay_sweep the sweeper must follow: at
	// the default, a minute, the first sweep comes after the waits below.
	sc, err := dlock.Open(ctx, "zk://"+srv.Addr()+root+"?lock_delay_sweep=20ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Close() })
	const key = "job"

	h, err := hc.Lock(ctx, key, dlock.WithLockDelay(testDelay))
	if err != nil {
		t.Fatal(err)
	}
	m := marksOf(t, admin, root, key)
	if idx := indexOf(t, admin, root); len(m) != 1 || len(idx) != 1 || !strings.HasSuffix(idx[0], "@"+m[0]) {
		t.Fatalf("marks %v, index %v: want the holder's mark and its entry", m, idx)
	}
	hconn.Close()

	// The sweeper counts the delay from when it finds the orphan.
	until := awaitMarkData(t, ctx, admin, zkdlock.KeyPathForTest(root, key)+"/"+m[0], 30*time.Second)
	asked := time.Now()
	info, err := sc.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if asked.Before(until) && (len(info.Holders) != 1 || info.Holders[0].Token != h.Token() || info.Holders[0].LockDelay != testDelay || !info.DelayedUntil.Equal(until)) {
		t.Errorf("Inspect while the delay is in force: holders %+v, DelayedUntil %v; want the ended holder with LockDelay %v, until %v", info.Holders, info.DelayedUntil, testDelay, until)
	}
	// The index is no key.
	infos, err := sc.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.Key != key {
			t.Errorf("List shows key %q", i.Key)
		}
	}

	awaitNoMarks(t, ctx, admin, root, key, testDelay+30*time.Second)
	if idx := indexOf(t, admin, root); len(idx) != 0 {
		t.Errorf("index entries left: %v", idx)
	}
}

// TestLockDelay_olderDlock: marks made by a dlock without the index go as
// they did: a TryLock is refused while the delay is in force, and granted
// after it (deleting the mark); an index entry whose mark an older dlock
// deleted goes at the next sweep.
func TestLockDelay_olderDlock(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	root := testRoot(t)
	c := plainClient(t, ctx, srv.Addr(), zkdlock.Options{Root: root, LockDelaySweep: 20 * time.Millisecond})
	const owner = "0123456789abcdef0123456789abcdef"
	mark := "delay-" + owner + "-" + strconv.FormatInt(testDelay.Milliseconds(), 10) + "-x"
	t.Run("markWithoutEntry", func(t *testing.T) {
		const key = "old"
		kp := zkdlock.KeyPathForTest(root, key)
		if _, err := admin.CreateContainer(kp, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Create(kp+"/"+mark, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
			t.Fatalf("TryLock beside an older dlock's orphan = %v, want ErrLocked", err)
		}
		until := awaitMarkData(t, ctx, admin, kp+"/"+mark, 30*time.Second)
		waitPast(t, ctx, until)
		l, err := c.TryLock(ctx, key)
		if err != nil && !errors.Is(err, dlock.ErrLocked) {
			t.Fatal(err)
		}
		if err == nil {
			mustUnlock(t, ctx, l)
		}
		// Granted, or the mark's janitor deleted it first: either way
		// the mark goes, alone.
		awaitNoMarks(t, ctx, admin, root, key, 30*time.Second)
	})
	t.Run("releaseWithoutEntry", func(t *testing.T) {
		// An operator deleted the index entry of a holder's mark: the
		// release still deletes the node and the mark.
		const key = "unindexed"
		l, err := c.Lock(ctx, key, dlock.WithLockDelay(testDelay))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range indexOf(t, admin, root) {
			if err := admin.Delete(zkdlock.DelayIndexForTest(root)+"/"+e, -1); err != nil {
				t.Fatal(err)
			}
		}
		mustUnlock(t, ctx, l)
		if m, q := marksOf(t, admin, root, key), children(t, admin, zkdlock.KeyPathForTest(root, key)); len(m) != 0 || len(q) != 0 {
			t.Errorf("after the release: key node's children %v", q)
		}
	})
	t.Run("entryWithoutMark", func(t *testing.T) {
		if _, err := admin.Create(zkdlock.DelayIndexForTest(root), nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
		entry := zkdlock.DelayIndexForTest(root) + "/gone@" + mark
		if _, err := admin.Create(entry, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		for {
			ok, _, ch, err := admin.ExistsW(entry)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			select {
			case <-ch:
			case <-timer.C:
				t.Fatalf("index entry %s of a gone mark still there", entry)
			case <-ctx.Done():
				t.Fatal("watchdog")
			}
		}
	})
}

// TestLockDelay_waiterQueuedAnew_reclaimsItsMark: a waiter with a
// lock-delay whose node goes (its session, or an operator) while its mark
// stays, and which another Client counts meanwhile as an orphan's (here
// written by hand, in the same transaction as the delete, with a time long
// past), queues anew and makes the mark its entry's again: once granted,
// its mark holds no time, and when its Client then dies the next TryLock
// is refused for the delay, not granted on the stale time.
func TestLockDelay_waiterQueuedAnew_reclaimsItsMark(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	root := testRoot(t)
	o := zkdlock.Options{Root: root}
	hc := plainClient(t, ctx, srv.Addr(), o)
	wconn := dialZK(t, ctx, srv.Addr(), connOpts{})
	wc := newClient(t, ctx, wconn, o)
	c := plainClient(t, ctx, srv.Addr(), o)
	const key = "job"
	kp := zkdlock.KeyPathForTest(root, key)

	h, err := hc.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *dlock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := wc.Lock(ctx, key, dlock.WithLockDelay(time.Minute))
		got <- result{l, err}
	}()

	// The waiter's node and mark, then both changed in one transaction.
	var mark, node string
	awaitWatched(t, ctx, 30*time.Second, func() (bool, <-chan zk.Event) {
		cs, _, ch, err := admin.ChildrenW(kp)
		if err != nil {
			t.Fatal(err)
		}
		mark, node = "", ""
		for _, c := range cs {
			if strings.HasPrefix(c, "delay-") {
				mark = c
			}
		}
		if owner, _, ok := strings.Cut(strings.TrimPrefix(mark, "delay-"), "-"); ok {
			for _, c := range cs {
				if c != mark && strings.Contains(c, owner) {
					node = c
				}
			}
		}
		return mark != "" && node != "", ch
	}, func() string { return "the waiter did not queue" })
	past := time.Now().Add(-time.Hour).UnixMilli()
	if _, err := admin.Multi(
		&zk.DeleteRequest{Path: kp + "/" + node, Version: -1},
		&zk.SetDataRequest{Path: kp + "/" + mark, Data: []byte("until=" + strconv.FormatInt(past, 10) + "\n"), Version: -1},
	); err != nil {
		t.Fatal(err)
	}

	mustUnlock(t, ctx, h)
	var r result
	select {
	case r = <-got:
	case <-ctx.Done():
		t.Fatal("watchdog")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	data, _, err := admin.Get(kp + "/" + mark)
	if err != nil {
		t.Fatalf("the granted waiter's mark: %v", err)
	}
	if strings.HasPrefix(string(data), "until=") {
		t.Errorf("the granted waiter's mark holds %q: a time counted while it was queued", data)
	}

	wconn.Close()
	if l, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
		if err == nil {
			mustUnlock(t, ctx, l)
		}
		t.Fatalf("TryLock after the delayed holder's Client died = %v, want ErrLocked for the delay", err)
	}
}

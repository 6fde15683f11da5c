package zkdlock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// TestNew_detectsStandalone_firstLockNeedsNoProof: a Client made with New
// and no Deployment on a standalone server reads /zookeeper/config once, at
// New, finds it empty, and counts its first grant from that read: the first
// Lock sends no sync and waits for nothing — 4 requests for the first cycle
// on a key (create, list ‖ watch, release), 3 after, besides the creation of
// the key node.
//
// Without detection (a Client that assumed an ensemble unless told
// Standalone) New would read nothing, and the first Lock of a Client made
// with New would send two syncs a lag apart (8.4 s with this 30 s session
// timeout): the test checks the count and the syncs.
func TestNew_detectsStandalone_firstLockNeedsNoProof(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})}
	before := time.Now()
	c, err := zkdlock.New(ctx, hook, &zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if n := hook.checks.Load(); n != 1 {
		t.Fatalf("New read /zookeeper/config %d times, want once", n)
	}
	for i, want := range []int64{4, 3, 3} {
		reqs, syncs, containers := hook.requests.Load(), hook.syncs.Load(), hook.containers.Load()
		l := mustLock(t, ctx, c, "first")
		// The lease counts from New's read at the earliest: its deadline
		// is at least a session timeout (less the margins) after New began.
		if safe := longSession - longSession/100 - 2*time.Millisecond; l.Deadline().Before(before.Add(safe)) {
			t.Errorf("cycle %d: deadline %v after New began, want at least %v", i, l.Deadline().Sub(before), safe)
		}
		mustUnlock(t, ctx, l)
		if n := hook.syncs.Load() - syncs; n != 0 {
			t.Errorf("cycle %d: %d syncs, want none: a standalone server needs no proof through a leader", i, n)
		}
		// A key node created costs its creation the first time (after the
		// listing that found none) and the second (the first release
		// deleted it: see TestLock_uncontendedCycle_threeRequests), and the
		// failed create and the creation after the server reaped it
		// between cycles.
		perContainer := int64(2)
		if i <= 1 {
			perContainer = 1
		}
		if n := hook.requests.Load() - reqs - perContainer*(hook.containers.Load()-containers); n != want {
			t.Errorf("cycle %d: %d requests, want %d", i, n, want)
		}
	}
	if n := hook.checks.Load(); n != 1 {
		t.Errorf("/zookeeper/config read %d times in all, want once (at New): a fresh proof needs no other", n)
	}
}

// TestNew_statedDeployment_noCheck: a Deployment stated (Standalone,
// Ensemble) or a tick time (an ensemble's) turns detection off: New reads
// no /zookeeper/config.
func TestNew_statedDeployment_noCheck(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	for _, o := range []zkdlock.Options{
		{Deployment: zkdlock.Standalone},
		{Deployment: zkdlock.Ensemble},
		{TickTime: 100 * time.Millisecond},
	} {
		hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}
		o.Root, o.SessionTimeout = testRoot(t), testTTL
		c, err := zkdlock.New(ctx, hook, &o)
		if err != nil {
			t.Fatal(err)
		}
		if n := hook.checks.Load(); n != 0 {
			t.Errorf("New with %v, tick %v: read /zookeeper/config %d times, want none", o.Deployment, o.TickTime, n)
		}
		_ = c.Close()
	}
}

// renewConn records, for each standalone check (a read of
// /zookeeper/config), when it was sent and whether the renewal it began
// succeeded (the exists of the lock node after it found the node), and
// tells when a check begins: a renewal starts with its check, so when check
// k+1 begins, renewal k is done and the lease's deadline reflects it.
type renewConn struct {
	*hookConn
	began chan int

	mu     sync.Mutex
	sends  []time.Time // guarded by mu
	passed []bool      // guarded by mu
}

func (c *renewConn) Get(path string) ([]byte, *zk.Stat, error) {
	if path != "/zookeeper/config" {
		return c.hookConn.Get(path)
	}
	c.mu.Lock()
	c.sends = append(c.sends, time.Now())
	c.passed = append(c.passed, false)
	n := len(c.sends) - 1
	c.mu.Unlock()
	select {
	case c.began <- n:
	default:
	}
	return c.hookConn.Get(path)
}

func (c *renewConn) Exists(path string) (bool, *zk.Stat, error) {
	ok, st, err := c.hookConn.Exists(path)
	if ok && err == nil {
		c.mu.Lock()
		if n := len(c.passed); n > 0 {
			c.passed[n-1] = true
		}
		c.mu.Unlock()
	}
	return ok, st, err
}

// lastPassed returns the send times of the last check before n that began a
// successful renewal and of the check before that one, and false when
// there is no such pair.
func (c *renewConn) lastPassed(n int) (prev time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for j := n - 1; j >= 1; j-- {
		if c.passed[j] {
			return c.sends[j-1], true
		}
	}
	return time.Time{}, false
}

// TestLease_detectedStandalone_countsFromTheLastRenewal: on a server found
// standalone, a renewal is the check (in place of the sync) and an exists,
// and the lease counts from the renewal itself, as on a server stated
// standalone: after renewal j its deadline is later than a session timeout
// (less the margins) after anything sent before renewal j began, such as
// the check of the renewal before. The ensemble rule counts from that
// renewal before at best, never later, and would fail the test; so would a
// renewal that synced.
func TestLease_detectedStandalone_countsFromTheLastRenewal(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	conn := &renewConn{hookConn: &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}, began: make(chan int, 16)}
	c := newClient(t, ctx, conn, zkdlock.Options{Root: testRoot(t)})
	l := mustLock(t, ctx, c, "k")
	defer mustUnlock(t, ctx, l)
	safe := testTTL - testTTL/100 - 2*time.Millisecond
	syncs := conn.syncs.Load()
	checked := 0
	for checked < 4 {
		var n int
		select {
		case n = <-conn.began: // renewal n begins: renewal n-1 is done
		case <-l.Done():
			t.Fatalf("lease lost: %v", l.Err())
		case <-ctx.Done():
			t.Fatal("no renewal (watchdog)")
		}
		prev, ok := conn.lastPassed(n)
		if !ok {
			continue // no renewal done yet but the first (or none passed)
		}
		checked++
		if d := l.Deadline(); !d.After(prev.Add(safe)) {
			t.Fatalf("deadline %v after the check before the last renewal, want more than %v: counted from the renewal before, as in an ensemble?", d.Sub(prev), safe)
		}
	}
	if n := conn.syncs.Load() - syncs; n != 0 {
		t.Errorf("%d syncs during the renewals, want none: the check takes the sync's place", n)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
}

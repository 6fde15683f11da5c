package zkdlock_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
)

// syncConn records when every sync was sent, and tells when one begins: a
// renewal starts with its sync, so when sync k+1 begins, renewal k is
// done and the lease's deadline reflects it.
type syncConn struct {
	zkdlock.Conn
	began chan int // receives the index of each sync as it begins

	// While gated, a sync waits after it began for a token on release (or
	// for release to close): the test then reads the deadline before the
	// sync can complete and move it.
	gated   atomic.Bool
	release chan struct{}

	mu    sync.Mutex
	sends []time.Time // guarded by mu
}

func (c *syncConn) Sync(path string) (string, error) {
	c.mu.Lock()
	c.sends = append(c.sends, time.Now())
	n := len(c.sends) - 1
	c.mu.Unlock()
	select {
	case c.began <- n:
	default:
	}
	if c.gated.Load() {
		<-c.release
	}
	return c.Conn.Sync(path)
}

func (c *syncConn) sent(i int) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sends[i]
}

// TestLease_ensemble_countsFromTheRenewalBefore: in an ensemble (what a
// Client stated Deployment Ensemble assumes, on the standalone test server
// too) the leader hears of a follower's
// clients only with the follower's next ping reply, so a renewal, the
// sync through the leader, proves only that the leader heard of what the
// session did half a tick (the lag) and more before it: the lease counts
// from there, never from the latest renewal itself, while the renewals go
// on and the lease lives. A Client made with New sees no
// ping and no handshake, so its first grant proves its own sync (two syncs,
// lag apart). With a tick time given and without (the lag is then 9/32 of
// the session timeout).
//
// On an engine or a grant that counts from the latest renewal the deadline
// after a renewal is that renewal's start plus the timeout, and the test
// fails: on a 3-node ensemble another client can be granted the key while
// the holder, cut off right after a renewal, still believes it holds it.
func TestLease_ensemble_countsFromTheRenewalBefore(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	for _, tc := range []struct {
		name string
		tick time.Duration
		lag  time.Duration // zkdlock's bound for it
	}{
		{"tick 100ms", 100 * time.Millisecond, 50*time.Millisecond + 100*time.Millisecond/16},
		{"tick unknown", 0, 9 * testTTL / 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			conn := &syncConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{}), began: make(chan int, 16), release: make(chan struct{})}
			c, err := zkdlock.New(ctx, conn, &zkdlock.Options{Root: testRoot(t), SessionTimeout: testTTL, TickTime: tc.tick, Deployment: zkdlock.Ensemble})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			safe := testTTL - testTTL/100 - 2*time.Millisecond
			l := mustLock(t, ctx, c, "k")
			defer mustUnlock(t, ctx, l)
			// The grant: two syncs lag apart; the lease counts from the
			// first at the latest.
			if first := conn.sent(0); l.Deadline().After(first.Add(safe)) {
				t.Fatalf("deadline at the grant %v after the first sync, want at most %v", l.Deadline().Sub(first), safe)
			}
			grantSyncs := len(conn.began)
			for range grantSyncs {
				<-conn.began
			}
			last := l.Deadline()
			// From now on each renewal's sync waits until the deadline
			// after the renewal before has been read.
			conn.gated.Store(true)
			defer close(conn.release)
			for k := grantSyncs; k < grantSyncs+4; k++ {
				var n int
				select {
				case n = <-conn.began: // renewal n begins: renewal n-1 is done
				case <-l.Done():
					t.Fatalf("lease lost after %d renewals: %v", k-grantSyncs, l.Err())
				case <-ctx.Done():
					t.Fatal("no renewal (watchdog)")
				}
				if n > grantSyncs {
					prev := conn.sent(n - 1) // the renewal just done (or tried)
					d := l.Deadline()
					if bound := prev.Add(safe - tc.lag); d.After(bound) {
						t.Fatalf("after the renewal sent at %v the deadline is %v after it, want at most %v (timeout less margins less the lag): counted from the renewal itself?",
							prev.Format("15:04:05.000"), d.Sub(prev), safe-tc.lag)
					}
				}
				conn.release <- struct{}{} // let renewal n complete
			}
			// A renewal may fail on a loaded machine and be retried, so
			// only the whole run must have moved the deadline.
			if d := l.Deadline(); !d.After(last) {
				t.Fatalf("four renewals did not move the deadline (%v)", d)
			}
			if err := l.Err(); err != nil {
				t.Fatalf("lease lost: %v", err)
			}
		})
	}
}

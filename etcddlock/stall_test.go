package etcddlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The waiter's lease in the stall tests: its queue check, the fallback
// that would find a changed predecessor by itself, comes at the first
// renewal (a third of the TTL, 200 s) and then once a TTL, so within
// stallWatchdog only the wait's own handling of the change can grant it.
const (
	stallWaiterTTL = 10 * time.Minute
	stallWatchdog  = 20 * time.Second
)

// A waiter whose predecessor's entry goes and comes back under the same
// name (its client releases and takes the key again on the same lease)
// between the waiter's read of the queue and the start of its watch is
// granted at once, not at its next queue check (here 200 s, past the
// watchdog). The watch, started after both writes, sees neither: what
// grants the waiter is the read at the watch's start (waitChange, then
// check), which finds an entry of that name with a new create revision
// and takes it for the predecessor's end.
//
// What it pins: with that read disabled, the test fails (Lock ends at the
// watchdog), whether or not the watch's loop takes a put of the entry ahead
// with a new create revision for its end; with the read, it passes either
// way: that case in the loop is a second line behind this read. The loop
// can only see such a put without the delete before it if the delete came
// before the watch's start revision and the put after; the read at the
// start, at a revision not older than the watch's created header, then sees
// the entry gone or re-created, and returns before the loop runs. No
// sequence of client calls reaches that case while the read is there; this
// test keeps the read honest.
func TestWait_predecessorRecreatedBeforeWatch(t *testing.T) {
	testPredecessorRecreated(t, func(ctx context.Context, c *dlock.Client, key string, ttl time.Duration) (func(context.Context) error, error) {
		l, err := c.Lock(ctx, key, dlock.WithTTL(ttl))
		if err != nil {
			return nil, err
		}
		return l.Unlock, nil
	})
}

// The same for an election: the leader resigns and campaigns again on the
// same lease while the candidate behind it starts its watch. The candidate
// must take the new entry for the leader's end (its create revision
// changed), as a lock's waiter does; what it ignores is a put of the same
// entry (same create revision), a Proclaim: see
// TestElection_candidateIgnoresProclaims. Pins the same as the lock's.
func TestWait_electionLeaderRecampaignsBeforeWatch(t *testing.T) {
	testPredecessorRecreated(t, func(ctx context.Context, c *dlock.Client, key string, ttl time.Duration) (func(context.Context) error, error) {
		term, err := c.Election(key).Campaign(ctx, "v", dlock.WithTTL(ttl))
		if err != nil {
			return nil, err
		}
		return term.Resign, nil
	})
}

// takeFunc takes key on c (a lock, a term) on a lease of ttl and returns
// its release.
type takeFunc func(ctx context.Context, c *dlock.Client, key string, ttl time.Duration) (func(context.Context) error, error)

// stallHolderTTL is the holder's lease: both its takes ask for the same
// TTL, so that the second one gets the first one's lease back from the
// client's idle leases.
const stallHolderTTL = time.Minute

// testPredecessorRecreated runs the sequence: the holder takes the key; a
// waiter queues behind it; in the waiter's window between its read and its
// watch, the holder releases and takes the key again with the same client,
// and the window closes only once the holder's new entry exists under the
// old name. The waiter must then hold the key before stallWatchdog.
func testPredecessorRecreated(t *testing.T, take takeFunc) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "stall/" + t.Name()
	holder := openClient(t, ctx, srv.URL())
	release, err := take(ctx, holder, key, stallHolderTTL)
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		release func(context.Context) error
		err     error
	}
	again := make(chan result, 1) // the holder's second take
	var once sync.Once
	var recreated atomic.Bool
	hook := func(_ context.Context, pred string) {
		// The waiter's first wait only: later ones (none expected) run
		// unhooked.
		once.Do(func() {
			recreated.Store(recreate(t, ctx, admin, pred, release, func() {
				rel, err := take(ctx, holder, key, stallHolderTTL)
				again <- result{rel, err}
			}))
		})
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	waiter, err := etcddlock.NewWithBeforeWatchForTest(ctx, cli, nil, hook)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })

	wctx, cancel := context.WithTimeout(ctx, stallWatchdog)
	defer cancel()
	got, err := take(wctx, waiter, key, stallWaiterTTL)
	if !recreated.Load() {
		t.Fatalf("the holder's entry was not re-created in the waiter's window (take: %v)", err)
	}
	if err != nil {
		t.Fatalf("waiter: %v (watchdog %v; its queue check would come after %v): it did not take the re-created entry for its predecessor's end",
			err, stallWatchdog, stallWaiterTTL/3)
	}
	if err := got(ctx); err != nil {
		t.Fatal(err)
	}
	// The holder's second take, queued behind the waiter, is granted now.
	var r result
	select {
	case r = <-again:
	case <-ctx.Done():
		t.Fatal("the holder's second take did not return (watchdog)")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.release(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := admin.Get(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("%d etcd keys left for %q, want none", len(resp.Kvs), key)
	}
}

// recreate releases the entry pred (release), starts takeAgain, which must
// take the key again on the same client and so on the same lease, and
// waits until pred exists again with a new create revision. It reports
// whether it saw that; failures are reported with t.Error, as it runs in
// the waiter's call.
func recreate(t *testing.T, ctx context.Context, admin *clientv3.Client, pred string, release func(context.Context) error, takeAgain func()) bool {
	before, err := admin.Get(ctx, pred, clientv3.WithKeysOnly())
	if err != nil || len(before.Kvs) != 1 {
		t.Errorf("the entry ahead, %q, before its release: %v (%v)", pred, before, err)
		return false
	}
	if err := release(ctx); err != nil {
		t.Errorf("release: %v", err)
		return false
	}
	go takeAgain()
	// The puts of pred since the read: the first with a new create
	// revision is the new entry, whose name says it is on the old lease.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range admin.Watch(wctx, pred, clientv3.WithRev(before.Header.Revision+1), clientv3.WithFilterDelete()) {
		if wr.Err() != nil {
			t.Errorf("watch %q: %v", pred, wr.Err())
			return false
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.PUT && ev.Kv.CreateRevision != before.Kvs[0].CreateRevision {
				return true
			}
		}
	}
	t.Errorf("%q not re-created (watchdog): the holder's next take used another lease", pred)
	return false
}

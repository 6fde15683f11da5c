package dlockgocron_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/integrations/gocron"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	_ "github.com/dlockdev/dlock/redisdlock"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
)

// watchdog bounds every wait of these tests; it is not a timing
// threshold: a healthy run needs a fraction of it.
const watchdog = 60 * time.Second

func newClient(t *testing.T, url string) *dlock.Client {
	t.Helper()
	c, err := dlock.Open(context.Background(), url, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLocker_skipsWhileHeldAndInHold: a second instance's Lock fails with
// ErrLocked while the first runs the job, and still after the first's
// Unlock, inside the minimum hold.
func TestLocker_skipsWhileHeldAndInHold(t *testing.T) {
	url := testserver.StartRedis(t).URL()
	ctx := context.Background()
	l1 := dlockgocron.NewLocker(newClient(t, url), "jobs/", dlock.HoldAtLeast(time.Hour))
	l2 := dlockgocron.NewLocker(newClient(t, url), "jobs/", dlock.HoldAtLeast(time.Hour))
	lk, err := l1.Lock(ctx, "close-orders")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Lock(ctx, "close-orders"); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("second Lock while the job runs = %v, want ErrLocked", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Lock(ctx, "close-orders"); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("second Lock inside the minimum hold = %v, want ErrLocked", err)
	}
	if _, err := l2.Lock(ctx, "other-job"); err != nil {
		t.Fatalf("another job's key: %v", err)
	}
}

// TestLocker_twoSchedulersRunOnce: two gocron schedulers (two instances)
// fire the same job at once; it runs on one, and the other's run is
// skipped with ErrLocked (its AfterLockError listener says so).
func TestLocker_twoSchedulersRunOnce(t *testing.T) {
	url := testserver.StartRedis(t).URL()
	var runs atomic.Int32
	outcomes := make(chan error, 2)
	for range 2 {
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(
			dlockgocron.NewLocker(newClient(t, url), "jobs/", dlock.HoldAtLeast(time.Hour))))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
			gocron.NewTask(func() { runs.Add(1); outcomes <- nil }),
			gocron.WithName("close-orders"),
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) { outcomes <- err })))
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() { s.Shutdown() })
	}
	var skipped int
	for range 2 {
		select {
		case err := <-outcomes:
			if err != nil {
				if !errors.Is(err, dlock.ErrLocked) {
					t.Fatalf("lock error %v, want ErrLocked", err)
				}
				skipped++
			}
		case <-time.After(watchdog):
			t.Fatal("the schedulers neither ran nor skipped the job (watchdog)")
		}
	}
	if runs.Load() != 1 || skipped != 1 {
		t.Fatalf("job ran %d times and was skipped %d times, want 1 and 1", runs.Load(), skipped)
	}
}

// TestElector_oneLeaderThenHandOver: of two Electors exactly one leads;
// when it closes (resigns), the other leads.
func TestElector_oneLeaderThenHandOver(t *testing.T) {
	url := testserver.StartRedis(t).URL()
	ctx := context.Background()
	e1 := dlockgocron.NewElector(newClient(t, url), "elect/scheduler", "one")
	e2 := dlockgocron.NewElector(newClient(t, url), "elect/scheduler", "two")
	defer e2.Close()
	var leader, other *dlockgocron.Elector
	eventually(t, "one of two electors leads", func() bool {
		switch a, b := e1.IsLeader(ctx) == nil, e2.IsLeader(ctx) == nil; {
		case a && b:
			t.Fatal("both electors lead")
		case a:
			leader, other = e1, e2
		case b:
			leader, other = e2, e1
		}
		return leader != nil
	})
	if err := other.IsLeader(ctx); !errors.Is(err, dlockgocron.ErrNotLeader) {
		t.Fatalf("the other's IsLeader = %v, want ErrNotLeader", err)
	}
	leader.Close()
	if err := leader.IsLeader(ctx); !errors.Is(err, dlockgocron.ErrNotLeader) {
		t.Fatalf("IsLeader after Close = %v, want ErrNotLeader", err)
	}
	eventually(t, "the other elector leads after the leader closed", func() bool { return other.IsLeader(ctx) == nil })
}

// eventually polls cond, failing at the watchdog: IsLeader is a state to
// look at, not an event to wait for.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (watchdog)", what, watchdog)
		}
		time.Sleep(5 * time.Millisecond) // polling a state, not synchronising
	}
}

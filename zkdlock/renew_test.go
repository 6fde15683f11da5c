package zkdlock_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
)

// TestRenewals_thousandLocks_fewRequestsPerInterval: a Client of Open
// holding a thousand locks sends at most ten requests per renewal interval
// once every lease has been renewed (the first renewal of each reads its
// node once), counted by the server on the Client's connection (ZooKeeper's
// cons: every packet it received, pings included), over two renewals of
// every lease.
func TestRenewals_thousandLocks_fewRequestsPerInterval(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	const n = 1000
	root := testRoot(t)

	var mu sync.Mutex
	renewals := make(map[string]int) // successful renewals by key
	var failed []error
	reached := make(chan struct{}, 1)
	target := 0 // signal reached once every key has this many renewals
	atTarget := func() bool {
		if len(renewals) < n {
			return false
		}
		for _, c := range renewals {
			if c < target {
				return false
			}
		}
		return true
	}
	hooks := dlock.Hooks{Renewed: func(_ context.Context, info dlock.RenewedInfo) {
		mu.Lock()
		defer mu.Unlock()
		if info.Err != nil {
			failed = append(failed, fmt.Errorf("renewal of %s: %w", info.Key, info.Err))
			return
		}
		renewals[info.Key]++
		if target > 0 && atTarget() {
			select {
			case reached <- struct{}{}:
			default:
			}
		}
	}}
	waitRenewed := func(times int) {
		t.Helper()
		mu.Lock()
		target = times
		done := atTarget()
		mu.Unlock()
		if !done {
			select {
			case <-reached:
			case <-ctx.Done():
				t.Fatalf("not every lease renewed %d times", times)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		target = 0
		if len(failed) > 0 {
			t.Fatalf("%d renewals failed, the first: %v", len(failed), failed[0])
		}
	}

	c, err := dlock.Open(ctx, fmt.Sprintf("zk://%s%s?session_timeout=3s", srv.Addr(), root), dlock.WithHooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	leases := make([]*dlock.Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				leases[i], errs[i] = c.Lock(ctx, fmt.Sprintf("k%d", i))
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Lock k%d: %v", i, err)
		}
	}

	// The Client's session, from its node of k0.
	keyPath := zkdlock.KeyPathForTest(root, "k0")
	kids := children(t, admin, keyPath)
	if len(kids) != 1 {
		t.Fatalf("k0 has nodes %v, want 1", kids)
	}
	_, stat, err := admin.Exists(keyPath + "/" + kids[0])
	if err != nil {
		t.Fatal(err)
	}
	received := func() int {
		t.Helper()
		out, err := srv.FourLetterWord(ctx, "cons")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(out, "\n") {
			if !strings.Contains(line, fmt.Sprintf("sid=0x%x,", stat.EphemeralOwner)) {
				continue
			}
			m := regexp.MustCompile(`recved=(\d+)`).FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("cons line without recved: %q", line)
			}
			v, _ := strconv.Atoi(m[1])
			return v
		}
		t.Fatalf("no connection of session 0x%x in cons:\n%s", stat.EphemeralOwner, out)
		return 0
	}

	waitRenewed(2)
	before := received()
	waitRenewed(4)
	if got := received() - before; got > 2*10 {
		t.Errorf("%d requests while each of %d leases was renewed twice, want at most 10 per renewal", got, n)
	} else {
		t.Logf("%d requests while each of %d leases was renewed twice", got, n)
	}
	for _, l := range leases {
		mustUnlock(t, ctx, l)
	}
}

package etcddlock_test

import (
	"fmt"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// Server requests per grant stay flat from 2 to 64 contenders, for a
// semaphore of 4 and for a read-write lock with one writer in four
// contenders, as for the lock (TestContended_requestsPerGrant): every
// request and stream message the contenders send, divided by the grants,
// is bounded by a constant that does not depend on how many wait. A
// semaphore's grant costs a join, a count of the entries ahead, a watch
// (created and cancelled), at most a few reads when what it waits for
// changes, and its release; a herd (every release waking every waiter)
// would cost reads in proportion to the waiters. A semaphore's waiter
// watches each entry it counts (up to 2·limit−1 of them), a create and a
// cancel message each on the client's watch stream: messages, not writes,
// so its bound is higher than the lock's, and still one that does not grow
// with the waiters.
func TestContended_requestsPerGrant_modes(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name  string
		limit int
		how   func(key string, i int) acquirer
		bound float64
	}{
		{"semaphore4", 4, func(key string, _ int) acquirer { return permit(key, 4) }, 20},
		{"rwmutex", 0, func(key string, i int) acquirer {
			if i%4 == 0 {
				return writer(key)
			}
			return reader(key)
		}, 10},
	} {
		per := map[int]float64{}
		for _, n := range []int{2, 8, 32, 64} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, n), func(t *testing.T) {
				key := "per-grant-modes/" + t.Name()
				rounds := max(2, 128/n)
				counters := make([]*counter, n)
				clients := make([]*dlock.Client, n)
				for i := range n {
					counters[i] = newCounter()
					clients[i] = counters[i].client(t, ctx, srv.Addr(), longTTL)
				}
				runModes(t, ctx, clients, rounds, tc.limit, func(i int) acquirer { return tc.how(key, i) })
				grants := n * rounds
				sent, by := takeAll(counters)
				per[n] = float64(sent) / float64(grants)
				t.Logf("%d grants, %.2f messages per grant: %v", grants, per[n], by)
				if per[n] > tc.bound {
					t.Errorf("%.2f messages per grant with %d contenders, want at most %v at any number", per[n], n, tc.bound)
				}
				checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
			})
		}
		t.Logf("%s: messages per grant by contenders: %v", tc.name, per)
	}
}

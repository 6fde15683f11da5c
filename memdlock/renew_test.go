package memdlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
)

// renewCounter counts each key's successful renewals, and closes a
// channel when every key of a round has reached its target.
type renewCounter struct {
	mu      sync.Mutex
	counts  map[string]int
	targets map[string]int // of the round; nil between rounds
	left    int
	reached chan struct{}
}

func (r *renewCounter) renewed(_ context.Context, info dlock.RenewedInfo) {
	if info.Err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[info.Key]++
	if t, ok := r.targets[info.Key]; ok && r.counts[info.Key] == t {
		if r.left--; r.left == 0 {
			close(r.reached)
		}
	}
}

// round returns a channel closed once each of keys has been renewed n
// more times.
func (r *renewCounter) round(keys []string, n int) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets, r.left, r.reached = map[string]int{}, len(keys), make(chan struct{})
	for _, k := range keys {
		r.targets[k] = r.counts[k] + n
	}
	return r.reached
}

func waitRound(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatal("leases not renewed (watchdog)")
	}
}

// TestClient_renewals_oneRequestPerIntervalForManyLeases: a client holding
// 1,000 locks renews them in a few requests per renewal interval, not
// 1,000, and a lease lost among them is lost alone.
func TestClient_renewals_oneRequestPerIntervalForManyLeases(t *testing.T) {
	rc := &renewCounter{counts: map[string]int{}}
	c, h, err := memdlock.New(nil, dlock.WithTTL(time.Second), dlock.WithHooks(dlock.Hooks{Renewed: rc.renewed}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	const n = 1000
	keys := make([]string, n)
	leases := make([]*dlock.Lease, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k-%d", i)
		leases[i] = lock(t, c, keys[i])
	}

	before := h.RenewRequests()
	const intervals = 2
	waitRound(t, rc.round(keys, intervals))
	// Each lease renews once per interval: the round took two.
	if got := h.RenewRequests() - before; got > 10*intervals {
		t.Errorf("%d renewal requests while each of %d leases renewed %d times, want at most 10 per renewal interval", got, n, intervals)
	}

	if !h.LoseLease(keys[7]) {
		t.Fatal("LoseLease: key not held")
	}
	select {
	case <-leases[7].Done():
	case <-time.After(time.Minute):
		t.Fatal("lost lease not ended (watchdog)")
	}
	others := append(keys[:7:7], keys[8:]...)
	waitRound(t, rc.round(others, 1))
	for i, l := range leases {
		if err := l.Err(); (err != nil) != (i == 7) {
			t.Fatalf("lease %d: Err = %v", i, err)
		}
	}
}

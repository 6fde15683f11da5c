package faults

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/gateway"
)

// grant is one grant as a client of the gateway saw it: from the moment the
// grant's reply arrived to the moment the client sent its release. The
// backend held the key for this client at least over that interval, so two
// grants' intervals that overlap are two holders at once.
type grant struct {
	client   int
	token    int64
	from, to time.Time
}

// checkGrants is the checker: no two intervals overlapping, and the tokens
// going up in the order the grants happened. No false positives: an
// interval is inside the backend's hold, never beyond it.
func checkGrants(grants []grant) []error {
	var errs []error
	byTime := slices.Clone(grants)
	slices.SortFunc(byTime, func(a, b grant) int { return a.from.Compare(b.from) })
	for i := 1; i < len(byTime); i++ {
		prev, g := byTime[i-1], byTime[i]
		if g.from.Before(prev.to) {
			errs = append(errs, fmt.Errorf("client %d (token %d) granted %v before client %d (token %d) released: two holders at once",
				g.client, g.token, prev.to.Sub(g.from), prev.client, prev.token))
		}
		if g.token <= prev.token {
			errs = append(errs, fmt.Errorf("client %d granted token %d after client %d's %d: tokens must go up", g.client, g.token, prev.client, prev.token))
		}
	}
	return errs
}

// Two gateways in front of one backend never grant a key twice, on each
// backend: clients contend through both with long polls, renew and
// release through the two in turn where the backend lets any instance
// serve a lease (through the granting one elsewhere), record each grant's
// interval and token, and the checker finds no overlap and tokens that go
// up with time.
func TestTwoGateways_checker(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			k := newLeaseKey()
			gws := []string{serveGateway(t, url, gateway.LeaseKey(k)), serveGateway(t, url, gateway.LeaseKey(k))}
			ctx := context.Background()
			direct, err := dlock.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			key := key(t, "contended")
			const clients, rounds = 6, 6
			var (
				mu     sync.Mutex
				grants []grant
				errs   []error
				wg     sync.WaitGroup
			)
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			for c := range clients {
				wg.Go(func() {
					base := gws[c%2]
					for round := range rounds {
						body := map[string]any{"key": key, "wait_ms": 30000}
						r, err := call(ctx, http.MethodPost, base, "/v1/acquire", body)
						for tries := 0; err == nil && r.Status == http.StatusAccepted && tries < 10; tries++ {
							body["ticket"] = r.Str("ticket")
							r, err = call(ctx, http.MethodPost, base, "/v1/acquire", body)
						}
						if err != nil || r.Status != http.StatusOK {
							fail(fmt.Errorf("client %d: acquire: %v %d %s", c, err, r.Status, r.Raw))
							return
						}
						g := grant{client: c, token: r.Num("token"), from: time.Now()}
						// The critical section: a renewal and a round trip
						// to the backend, so that holders have time to
						// overlap. Round-robin over the instances where any
						// serves the lease.
						id, via := r.Str("lease_id"), base
						if b.portable {
							via = gws[(c+round+1)%2]
						}
						rn, err := call(ctx, http.MethodPost, via, "/v1/leases/"+id+"/renew", nil)
						if err != nil || rn.Status != http.StatusOK {
							fail(fmt.Errorf("client %d: renew: %v %d %s", c, err, rn.Status, rn.Raw))
						}
						if _, err := direct.Inspect(ctx, key); err != nil {
							fail(err)
						}
						g.to = time.Now()
						mu.Lock()
						grants = append(grants, g)
						mu.Unlock()
						if b.portable {
							via = gws[(c+round)%2]
						}
						rel, err := call(ctx, http.MethodDelete, via, "/v1/leases/"+id, nil)
						if err != nil || rel.Status != http.StatusOK {
							fail(fmt.Errorf("client %d: release: %v %d %s", c, err, rel.Status, rel.Raw))
							return
						}
					}
				})
			}
			wg.Wait()
			for _, err := range errs {
				t.Error(err)
			}
			if len(grants) != clients*rounds {
				t.Errorf("%d grants, want %d", len(grants), clients*rounds)
			}
			for _, err := range checkGrants(grants) {
				t.Error(err)
			}
		})
	}
}

// The checker itself: overlapping intervals and tokens out of order are
// found, a clean history passes.
func TestCheckGrants(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	clean := []grant{{0, 1, at(0), at(10)}, {1, 2, at(11), at(20)}, {0, 5, at(20), at(30)}}
	if errs := checkGrants(clean); len(errs) != 0 {
		t.Errorf("clean history: %v", errs)
	}
	overlap := []grant{{0, 1, at(0), at(10)}, {1, 2, at(5), at(20)}}
	if errs := checkGrants(overlap); len(errs) != 1 {
		t.Errorf("overlapping grants: %v, want one error", errs)
	}
	backwards := []grant{{0, 3, at(0), at(10)}, {1, 2, at(11), at(20)}}
	if errs := checkGrants(backwards); len(errs) != 1 {
		t.Errorf("tokens going down: %v, want one error", errs)
	}
}

package gwtest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// Two gateways in front of one Redis never grant a key twice: clients
// contending through both take turns, each critical section alone, the
// tokens going up from one to the next.
func TestTwoGateways_neverGrantTwice(t *testing.T) {
	gws := []*env{newEnv(t), newEnv(t)}
	key := gws[0].key("contended")
	const clients, rounds = 6, 8
	var (
		mu        sync.Mutex
		inside    int
		lastToken int64
		errs      []error
		wg        sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	ctx := context.Background()
	for c := range clients {
		wg.Go(func() {
			e := gws[c%2]
			for range rounds {
				body := map[string]any{"key": key, "wait_ms": 30000}
				r, err := e.try(ctx, http.MethodPost, "/v1/acquire", body)
				for tries := 0; err == nil && r.status == http.StatusAccepted && tries < 10; tries++ {
					body["ticket"] = r.str("ticket")
					r, err = e.try(ctx, http.MethodPost, "/v1/acquire", body)
				}
				if err != nil || r.status != http.StatusOK {
					fail(fmt.Errorf("client %d: acquire: %v %d %s", c, err, r.status, r.raw))
					return
				}
				mu.Lock()
				inside++
				if inside != 1 {
					errs = append(errs, fmt.Errorf("client %d: %d holders at once", c, inside))
				}
				if tok := r.num("token"); tok <= lastToken {
					errs = append(errs, fmt.Errorf("client %d: token %d after %d", c, tok, lastToken))
				} else {
					lastToken = tok
				}
				mu.Unlock()
				// The critical section, a round trip long: the backend
				// shows this grant alone, and another holder entering
				// meanwhile would be counted.
				if in, err := e.direct.Inspect(ctx, key); err != nil || len(in.Holders) != 1 || in.Holders[0].Token != uint64(r.num("token")) {
					fail(fmt.Errorf("client %d: holding token %d, the backend shows %+v (%v)", c, r.num("token"), in, err))
				}
				mu.Lock()
				inside--
				mu.Unlock()
				rel, err := e.try(ctx, http.MethodDelete, "/v1/leases/"+r.str("lease_id"), nil)
				if err != nil || rel.status != http.StatusOK {
					fail(fmt.Errorf("client %d: release: %v %d %s", c, err, rel.status, rel.raw))
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
}

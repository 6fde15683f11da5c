package gwtest

import (
	"context"
	"net/http"
	"testing"
)

// The gateway's core on etcd and ZooKeeper (the other tests run on
// Redis): grants, conflicts, a long poll granted at a release, a ticket
// keeping its place, a stream releasing on disconnect, a TTL the backend
// refuses.
func TestBackends(t *testing.T) {
	for _, b := range otherBackends {
		t.Run(b.name, func(t *testing.T) {
			e := newEnvOn(t, b.url(t))
			ctx := context.Background()
			key := e.Key("k")
			a := e.acquire(map[string]any{"key": key})
			e.want(a, http.StatusOK, "")
			e.want(e.acquire(map[string]any{"key": key}), http.StatusConflict, "locked")
			e.want(e.do(ctx, http.MethodPost, "/v1/leases/"+a.Str("lease_id")+"/renew", nil), http.StatusOK, "")

			w := e.acquire(map[string]any{"key": key, "wait_ms": 20})
			e.want(w, http.StatusAccepted, "")
			e.want(e.do(ctx, http.MethodDelete, "/v1/leases/"+a.Str("lease_id"), nil), http.StatusOK, "")
			g := e.acquire(map[string]any{"key": key, "ticket": w.Str("ticket"), "wait_ms": 30000})
			e.want(g, http.StatusOK, "")
			if g.Num("token") <= a.Num("token") || g.Str("token_str") == a.Str("token_str") {
				t.Fatalf("tokens %s then %s: want them to go up", a.Str("token_str"), g.Str("token_str"))
			}
			e.want(e.do(ctx, http.MethodDelete, "/v1/leases/"+g.Str("lease_id"), nil), http.StatusOK, "")

			s := e.hold(`{"key":"` + key + `"}`)
			if ev := s.next(t); ev["event"] != "granted" {
				t.Fatalf("first event %v", ev)
			}
			e.grantedAfterClose(s, key)
			if b.name == "zk" {
				// The session timeout fixes every lease's TTL there.
				e.want(e.acquire(map[string]any{"key": e.Key("ttl"), "ttl_ms": 1234}), http.StatusBadRequest, "invalid_request")
			}
		})
	}
}

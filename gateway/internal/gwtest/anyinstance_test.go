package gwtest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/gateway"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// twoGateways returns two gateway instances in front of the backend at
// url, sharing a lease key, and using the first one's keys.
func twoGateways(t *testing.T, url string) (a, b *env) {
	t.Helper()
	k := make([]byte, gateway.MinLeaseKeyLen)
	_, _ = rand.Read(k)
	a = newEnvOn(t, url, gateway.LeaseKey(k))
	b = newEnvOn(t, url, gateway.LeaseKey(k))
	b.Prefix = a.Prefix
	return a, b
}

// forge returns id altered: its payload changed by mutate, its mac kept;
// or, with mutate nil, its payload kept and its mac changed.
func forge(id string, mutate func(p map[string]any)) string {
	p64, m64, _ := strings.Cut(strings.TrimPrefix(id, "l_"), ".")
	enc := base64.RawURLEncoding
	if mutate == nil {
		mac, _ := enc.DecodeString(m64)
		mac[0] ^= 1
		return "l_" + p64 + "." + enc.EncodeToString(mac)
	}
	raw, _ := enc.DecodeString(p64)
	var p map[string]any
	_ = json.Unmarshal(raw, &p)
	mutate(p)
	raw, _ = json.Marshal(p)
	return "l_" + enc.EncodeToString(raw) + "." + m64
}

// portableBackends are the backends that keep a lease's state, where any
// instance serves a lease.
var portableBackends = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"redis", func(*testing.T) string { return "redis://" + redisAddr + "/0" }},
	{"etcd", func(t *testing.T) string { return testserver.SharedEtcd(t).URL() + "?lease_per_grant=true" }},
}

// Acquired through one instance, a lease is renewed, inspected and
// released through another, and the next waiter (polling the second) is
// granted at the release.
func TestLease_anyInstance(t *testing.T) {
	for _, be := range portableBackends {
		t.Run(be.name, func(t *testing.T) {
			a, b := twoGateways(t, be.url(t))
			ctx := context.Background()
			key := a.Key("k")
			g := a.acquire(map[string]any{"key": key, "ttl_ms": 5000})
			a.want(g, http.StatusOK, "")
			if h := g.Header.Get(gateway.StickyHeader); h != "false" {
				t.Fatalf("sticky header %q, want false", h)
			}
			id, tok := g.Str("lease_id"), g.Num("token")

			next := make(chan reply, 1)
			go func() {
				r, _ := b.try(ctx, http.MethodPost, "/v1/acquire", map[string]any{"key": key, "wait_ms": waitFor.Milliseconds()})
				next <- r
			}()
			b.eventually("the poll waits on the backend", func() bool { return len(b.Info(key).Waiters) == 1 })

			rn := b.do(ctx, http.MethodPost, "/v1/leases/"+id+"/renew", nil)
			b.want(rn, http.StatusOK, "")
			if rn.Num("token") != tok || rn.Num("valid_for_ms") <= 0 || rn.Str("key") != key || rn.Header.Get(gateway.StickyHeader) != "false" {
				t.Fatalf("renew through the other instance: %s", rn.Raw)
			}
			b.want(b.do(ctx, http.MethodGet, "/v1/leases/"+id, nil), http.StatusOK, "")
			b.want(b.do(ctx, http.MethodPost, "/v1/leases/"+id+"/release", nil), http.StatusOK, "")
			select {
			case r := <-next:
				b.want(r, http.StatusOK, "")
				if r.Num("token") <= tok {
					t.Fatalf("next token %d, want above %d", r.Num("token"), tok)
				}
			case <-time.After(waitFor):
				t.Fatal("the waiter was not granted at the release")
			}
			b.want(b.do(ctx, http.MethodPost, "/v1/leases/"+id+"/release", nil), http.StatusGone, "lease_released")
			// The granting instance asks the backend, which no longer
			// holds it for this owner.
			a.want(a.do(ctx, http.MethodPost, "/v1/leases/"+id+"/renew", nil), http.StatusGone, "lease_expired")
		})
	}
}

// The instance that granted a lease closes (its leases in its table would
// be released): the lease, held by no instance, lives on as long as the
// client renews it through another, past its TTL, and is released there.
func TestLease_anyInstance_grantingInstanceClosed(t *testing.T) {
	for _, be := range portableBackends {
		t.Run(be.name, func(t *testing.T) {
			a, b := twoGateways(t, be.url(t))
			ctx := context.Background()
			key := a.Key("k")
			const ttl = time.Second
			g := a.acquire(map[string]any{"key": key, "ttl_ms": ttl.Milliseconds()})
			a.want(g, http.StatusOK, "")
			id, tok := g.Str("lease_id"), uint64(g.Num("token"))
			granted := time.Now()
			a.Srv.Close()
			if err := a.gw.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// The client renews a few times a TTL, for three TTLs.
			for time.Since(granted) < 3*ttl {
				b.want(b.do(ctx, http.MethodPost, "/v1/leases/"+id+"/renew", nil), http.StatusOK, "")
				time.Sleep(ttl / 5) // the client's renewal interval, not a wait for an event
			}
			if _, err := b.Direct.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
				t.Fatalf("TryLock beside the renewed lease: %v, want ErrLocked", err)
			}
			if in := b.Info(key); len(in.Holders) != 1 || in.Holders[0].Token != tok {
				t.Fatalf("holders %+v, want token %d", in.Holders, tok)
			}
			b.want(b.do(ctx, http.MethodDelete, "/v1/leases/"+id, nil), http.StatusOK, "")
			if in := b.Info(key); len(in.Holders) != 0 {
				t.Fatalf("after the release through the other instance, holders %+v", in.Holders)
			}
		})
	}
}

// A lease its client stopped renewing expires on the backend (the next
// waiter, polling the other instance, is granted), and the other
// instance then says it is gone: it never says valid for a lease the
// server did not extend.
func TestLease_anyInstance_expired(t *testing.T) {
	for _, be := range portableBackends {
		t.Run(be.name, func(t *testing.T) {
			a, b := twoGateways(t, be.url(t))
			ctx := context.Background()
			key := a.Key("k")
			g := a.acquire(map[string]any{"key": key, "ttl_ms": 300})
			a.want(g, http.StatusOK, "")
			next := b.acquire(map[string]any{"key": key, "wait_ms": waitFor.Milliseconds()})
			b.want(next, http.StatusOK, "")
			if next.Num("token") <= g.Num("token") {
				t.Fatalf("token %d after the expired %d", next.Num("token"), g.Num("token"))
			}
			id := g.Str("lease_id")
			b.want(b.do(ctx, http.MethodPost, "/v1/leases/"+id+"/renew", nil), http.StatusGone, "lease_expired")
			b.want(b.do(ctx, http.MethodGet, "/v1/leases/"+id, nil), http.StatusGone, "lease_expired")
			b.want(b.do(ctx, http.MethodDelete, "/v1/leases/"+id, nil), http.StatusGone, "lease_lost")
			if in := b.Info(key); len(in.Holders) != 1 || in.Holders[0].Token != uint64(next.Num("token")) {
				t.Fatalf("holders %+v: the late renew and release touched the next holder's grant", in.Holders)
			}
		})
	}
}

// A lease id altered or forged is refused before anything reaches the
// backend, and the lease it was made from is unchanged.
func TestLease_forgedIDs(t *testing.T) {
	a, b := twoGateways(t, "redis://"+redisAddr+"/0")
	ctx := context.Background()
	key := a.Key("k")
	g := a.acquire(map[string]any{"key": key, "ttl_ms": 5000})
	a.want(g, http.StatusOK, "")
	id, tok := g.Str("lease_id"), uint64(g.Num("token"))
	other := newEnv(t) // an instance with a key of its own
	o := other.acquire(map[string]any{"key": other.Key("k")})
	other.want(o, http.StatusOK, "")

	for _, tc := range []struct {
		name, id string
		status   int
		code     string
	}{
		{"mac", forge(id, nil), http.StatusNotFound, "lease_not_found"},
		{"ttl", forge(id, func(p map[string]any) { p["ttl"] = 3600000 }), http.StatusNotFound, "lease_not_found"},
		{"token", forge(id, func(p map[string]any) { p["t"] = float64(tok + 1) }), http.StatusNotFound, "lease_not_found"},
		{"key", forge(id, func(p map[string]any) { p["k"] = a.Key("other") }), http.StatusNotFound, "lease_not_found"},
		{"another instance's key", o.Str("lease_id"), http.StatusMisdirectedRequest, "wrong_instance"},
		{"not base64", "l_!!.!!", http.StatusBadRequest, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, e := range []*env{a, b} {
				e, ge := *e, *e.Env
				ge.T = t // the subtest's: want fails it
				e.Env = &ge
				for _, path := range []string{"/renew", "/release", ""} {
					method := http.MethodPost
					if path == "" {
						method = http.MethodGet
					}
					e.want(e.do(ctx, method, "/v1/leases/"+tc.id+path, nil), tc.status, tc.code)
				}
			}
		})
	}
	in := a.Info(key)
	if len(in.Holders) != 1 || in.Holders[0].Token != tok || in.Holders[0].TTL > 5*time.Second {
		t.Fatalf("holders %+v: want token %d, unchanged (TTL at most 5s)", in.Holders, tok)
	}
	b.want(b.do(ctx, http.MethodDelete, "/v1/leases/"+id, nil), http.StatusOK, "")
}

// Without a lease key in common, an instance names the one that granted a
// lease.
func TestLease_otherInstanceWithoutLeaseKey(t *testing.T) {
	a := newEnv(t)
	b := newEnv(t)
	g := a.acquire(map[string]any{"key": a.Key("k")})
	a.want(g, http.StatusOK, "")
	r := b.do(context.Background(), http.MethodPost, "/v1/leases/"+g.Str("lease_id")+"/renew", nil)
	b.want(r, http.StatusMisdirectedRequest, "wrong_instance")
	if !strings.Contains(r.Raw, a.gw.Instance()) {
		t.Fatalf("%s: want the granting instance %s named", r.Raw, a.gw.Instance())
	}
}

// On ZooKeeper a lease lives in the session of the instance that granted
// it (and on etcd without lease_per_grant, on the lease its Client shares
// with its other locks): its replies say it is sticky, and another
// instance refuses its requests with 421 wrong_instance naming the
// granting one, changing nothing.
func TestLease_sticky(t *testing.T) {
	for _, be := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"zk", func(t *testing.T) string { return "zk://" + testserver.SharedZooKeeper(t).Addr() }},
		{"etcd shared lease", func(t *testing.T) string { return testserver.SharedEtcd(t).URL() }},
	} {
		t.Run(be.name, func(t *testing.T) {
			a, b := twoGateways(t, be.url(t))
			ctx := context.Background()
			key := a.Key("k")
			g := a.acquire(map[string]any{"key": key})
			a.want(g, http.StatusOK, "")
			if h := g.Header.Get(gateway.StickyHeader); h != "true" {
				t.Fatalf("sticky header %q, want true", h)
			}
			id, tok := g.Str("lease_id"), uint64(g.Num("token"))
			for _, req := range [][2]string{{http.MethodPost, "/renew"}, {http.MethodGet, ""}, {http.MethodDelete, ""}, {http.MethodPost, "/release"}} {
				r := b.do(ctx, req[0], "/v1/leases/"+id+req[1], nil)
				b.want(r, http.StatusMisdirectedRequest, "wrong_instance")
				if !strings.Contains(r.Raw, a.gw.Instance()) || r.Header.Get(gateway.StickyHeader) != "true" {
					t.Fatalf("%s %s on the other instance: %s (sticky %q): want the granting instance %s named, sticky", req[0], req[1], r.Raw, r.Header.Get(gateway.StickyHeader), a.gw.Instance())
				}
			}
			if in := a.Info(key); len(in.Holders) != 1 || in.Holders[0].Token != tok {
				t.Fatalf("holders %+v, want token %d still", in.Holders, tok)
			}
			rn := a.do(ctx, http.MethodPost, "/v1/leases/"+id+"/renew", nil)
			a.want(rn, http.StatusOK, "")
			if rn.Header.Get(gateway.StickyHeader) != "true" {
				t.Fatalf("renew reply's sticky header %q", rn.Header.Get(gateway.StickyHeader))
			}
			a.want(a.do(ctx, http.MethodDelete, "/v1/leases/"+id, nil), http.StatusOK, "")
		})
	}
}

// The id is the capability only for a principal allowed on its key, on
// every instance: another principal's renew and release through the other
// instance are refused, and change nothing.
func TestLease_anyInstance_permissions(t *testing.T) {
	k := make([]byte, gateway.MinLeaseKeyLen)
	_, _ = rand.Read(k)
	a := newAuthEnv(t, gateway.LeaseKey(k))
	var creds *gateway.Credentials
	b := newEnv(t, gateway.LeaseKey(k), gateway.Authenticate(func(r *http.Request) (gateway.Principal, error) {
		return creds.Authenticate(r)
	}))
	b.Prefix = a.Prefix
	creds = b.credentials()
	ctx := context.Background()
	key := a.Key("orders/1")
	g := a.as(tokOrders).acquire(map[string]any{"key": key, "ttl_ms": 10000})
	a.want(g, http.StatusOK, "")
	id, tok := g.Str("lease_id"), uint64(g.Num("token"))
	reader := b.as(tokReader)
	reader.want(reader.do(ctx, http.MethodPost, "/v1/leases/"+id+"/renew", nil), http.StatusForbidden, "forbidden")
	reader.want(reader.do(ctx, http.MethodDelete, "/v1/leases/"+id, nil), http.StatusForbidden, "forbidden")
	if in := b.Info(key); len(in.Holders) != 1 || in.Holders[0].Token != tok {
		t.Fatalf("holders %+v, want token %d still", in.Holders, tok)
	}
	orders := b.as(tokOrders)
	orders.want(orders.do(ctx, http.MethodPost, "/v1/leases/"+id+"/renew", nil), http.StatusOK, "")
	orders.want(orders.do(ctx, http.MethodDelete, "/v1/leases/"+id, nil), http.StatusOK, "")
}

package gwtest

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAcquire_renewRelease(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	sent := time.Now()
	r := e.acquire(map[string]any{"key": key, "ttl_ms": 5000})
	took := time.Since(sent)
	e.want(r, http.StatusOK, "")
	id, tok := r.Str("lease_id"), r.Num("token")
	if !strings.HasPrefix(id, "l_") {
		t.Fatalf("lease_id %q: want l_ and its reference", id)
	}
	// Redis keeps the lease's state: any instance serves it.
	if h := r.Header.Get("Dlock-Gateway-Sticky"); h != "false" {
		t.Fatalf("sticky header %q, want false on Redis", h)
	}
	if r.Str("token_str") != strconv.FormatInt(tok, 10) || tok == 0 {
		t.Fatalf("token %d, token_str %q: want the same non-zero number", tok, r.Str("token_str"))
	}
	// Counted from the request's receipt, the validity may include the
	// time the acquire took, never more.
	if v := r.Num("valid_for_ms"); v <= 0 || v > r.Num("ttl_ms")+took.Milliseconds()+1 || r.Num("ttl_ms") != 5000 {
		t.Fatalf("valid_for_ms %d, ttl_ms %d, request took %v: want 0 < valid_for_ms <= ttl_ms (5000) + the request's time", v, r.Num("ttl_ms"), took)
	}
	if _, err := time.Parse(time.RFC3339Nano, r.Str("received_at")); err != nil {
		t.Fatalf("received_at: %v", err)
	}
	if r.Header.Get("Dlock-Gateway-Instance") != e.gw.Instance() {
		t.Fatalf("instance header %q, want %q", r.Header.Get("Dlock-Gateway-Instance"), e.gw.Instance())
	}
	if in := e.Info(key); len(in.Holders) != 1 || in.Holders[0].Token != uint64(tok) {
		t.Fatalf("backend holders %+v, want one with token %d", in.Holders, tok)
	}

	e.want(e.acquire(map[string]any{"key": key}), http.StatusConflict, "locked")

	ctx := context.Background()
	rn := e.do(ctx, http.MethodPost, "/v1/leases/"+id+"/renew", nil)
	e.want(rn, http.StatusOK, "")
	if rn.Num("token") != tok || rn.Num("valid_for_ms") <= 0 {
		t.Fatalf("renew: %s", rn.Raw)
	}
	e.want(e.do(ctx, http.MethodGet, "/v1/leases/"+id, nil), http.StatusOK, "")

	e.want(e.do(ctx, http.MethodDelete, "/v1/leases/"+id, nil), http.StatusOK, "")
	if in := e.Info(key); len(in.Holders) != 0 {
		t.Fatalf("after release, backend holders %+v", in.Holders)
	}
	// A replayed release and a late renew say what became of the lease.
	e.want(e.do(ctx, http.MethodDelete, "/v1/leases/"+id, nil), http.StatusGone, "lease_released")
	e.want(e.do(ctx, http.MethodPost, "/v1/leases/"+id+"/renew", nil), http.StatusGone, "lease_released")

	r2 := e.acquire(map[string]any{"key": key})
	e.want(r2, http.StatusOK, "")
	if r2.Num("token") <= tok {
		t.Fatalf("next token %d, want above %d", r2.Num("token"), tok)
	}
}

func TestAcquire_kinds(t *testing.T) {
	e := newEnv(t)
	sem := e.Key("sem")
	for range 2 {
		r := e.acquire(map[string]any{"key": sem, "kind": "semaphore", "limit": 2})
		e.want(r, http.StatusOK, "")
		if r.Str("mode") != "shared" || r.Num("limit") != 2 {
			t.Fatalf("permit: %s", r.Raw)
		}
	}
	e.want(e.acquire(map[string]any{"key": sem, "kind": "semaphore", "limit": 2}), http.StatusConflict, "locked")
	e.want(e.acquire(map[string]any{"key": sem}), http.StatusConflict, "kind_mismatch")

	rw := e.Key("rw")
	e.want(e.acquire(map[string]any{"key": rw, "kind": "rwmutex", "mode": "shared"}), http.StatusOK, "")
	e.want(e.acquire(map[string]any{"key": rw, "kind": "rwmutex", "mode": "shared"}), http.StatusOK, "")
	e.want(e.acquire(map[string]any{"key": rw, "kind": "rwmutex"}), http.StatusConflict, "locked")
	if in := e.Info(rw); len(in.Holders) != 2 {
		t.Fatalf("readers on the backend: %+v", in.Holders)
	}
}

// A client that stops renewing loses its lease within its TTL, and the
// next waiter is granted.
func TestLease_notRenewedExpires(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	a := e.acquire(map[string]any{"key": key, "ttl_ms": 300})
	e.want(a, http.StatusOK, "")
	b := e.acquire(map[string]any{"key": key, "wait_ms": 30000})
	e.want(b, http.StatusOK, "")
	if b.Num("token") <= a.Num("token") {
		t.Fatalf("waiter's token %d, want above the expired holder's %d", b.Num("token"), a.Num("token"))
	}
	e.want(e.do(context.Background(), http.MethodPost, "/v1/leases/"+a.Str("lease_id")+"/renew", nil), http.StatusGone, "lease_expired")
}

func TestLease_unknownAndMalformedIDs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.acquire(map[string]any{"key": e.Key("k")})
	e.want(a, http.StatusOK, "")
	// Well formed, naming this instance, but signed by nobody.
	unknown := forge(a.Str("lease_id"), nil)
	e.want(e.do(ctx, http.MethodPost, "/v1/leases/"+unknown+"/renew", nil), http.StatusNotFound, "lease_not_found")
	e.want(e.do(ctx, http.MethodDelete, "/v1/leases/"+unknown, nil), http.StatusNotFound, "lease_not_found")
	e.want(e.do(ctx, http.MethodDelete, "/v1/leases/nonsense", nil), http.StatusBadRequest, "invalid_request")
	e.want(e.do(ctx, http.MethodDelete, "/v1/leases/l_"+strings.Repeat("ab", 16), nil), http.StatusBadRequest, "invalid_request")
}

func TestLimits(t *testing.T) {
	// On Redis an explicit lease, once granted, is held by no instance
	// (any renews it by reference): it counts while it is acquired only.
	e := newEnv(t, gatewayMaxLeases(1), gatewayMaxWaiters(1))
	e.want(e.acquire(map[string]any{"key": e.Key("a")}), http.StatusOK, "")
	// The waiter reserves the last lease slot.
	w := e.acquire(map[string]any{"key": e.Key("a"), "wait_ms": 10})
	e.want(w, http.StatusAccepted, "")
	e.want(e.acquire(map[string]any{"key": e.Key("b")}), http.StatusTooManyRequests, "too_many_leases")
	e.want(e.do(context.Background(), http.MethodDelete, "/v1/tickets/"+w.Str("ticket"), nil), http.StatusOK, "")
	e.want(e.acquire(map[string]any{"key": e.Key("b")}), http.StatusOK, "")

	e2 := newEnv(t, gatewayMaxWaiters(1))
	e2.want(e2.acquire(map[string]any{"key": e2.Key("a")}), http.StatusOK, "")
	e2.want(e2.acquire(map[string]any{"key": e2.Key("a"), "wait_ms": 10}), http.StatusAccepted, "")
	e2.want(e2.acquire(map[string]any{"key": e2.Key("a"), "wait_ms": 10}), http.StatusTooManyRequests, "too_many_waiters")
}

// A lease the backend ends is gone: renew says so. On Redis the lease is
// renewed by reference, and the server cannot tell a deleted grant from an
// expired one: both are lease_expired. A release then finds that nobody
// was granted the key since (nothing overlapped), and answers released.
func TestLease_lostOnTheBackend(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	a := e.acquire(map[string]any{"key": key, "ttl_ms": 300})
	e.want(a, http.StatusOK, "")
	for _, k := range strings.Fields(e.redisKeys()) {
		e.redis("DEL", k)
	}
	id := a.Str("lease_id")
	var last reply
	e.eventually("renew says the lease was lost", func() bool {
		last = e.do(context.Background(), http.MethodPost, "/v1/leases/"+id+"/renew", nil)
		return last.Status != http.StatusOK
	})
	e.want(last, http.StatusGone, "lease_expired")
	e.want(e.do(context.Background(), http.MethodDelete, "/v1/leases/"+id, nil), http.StatusOK, "")
}

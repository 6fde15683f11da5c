package gwtest

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/dlockdev/dlock/gateway/internal/testhook"
)

// A wait that ends ungranted returns a ticket that keeps its place in the
// FIFO queue: the second waiter, polling again without its ticket's help,
// is served after the first.
func TestWait_ticketKeepsPlace(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	ctx := context.Background()
	a := e.acquire(map[string]any{"key": key})
	e.want(a, http.StatusOK, "")
	b := e.acquire(map[string]any{"key": key, "wait_ms": 20})
	e.want(b, http.StatusAccepted, "")
	c := e.acquire(map[string]any{"key": key, "wait_ms": 20})
	e.want(c, http.StatusAccepted, "")
	if b.Str("ticket") == "" || b.Num("ticket_valid_for_ms") <= 0 {
		t.Fatalf("202 without a ticket: %s", b.Raw)
	}
	if in := e.Info(key); len(in.Waiters) != 2 {
		t.Fatalf("waiters on the backend: %+v, want b and c", in.Waiters)
	}
	e.want(e.do(ctx, http.MethodDelete, "/v1/leases/"+a.Str("lease_id"), nil), http.StatusOK, "")

	// c polls first, but b is ahead in the queue.
	e.want(e.acquire(map[string]any{"key": key, "ticket": c.Str("ticket"), "wait_ms": 20}), http.StatusAccepted, "")
	bg := e.acquire(map[string]any{"key": key, "ticket": b.Str("ticket"), "wait_ms": 30000})
	e.want(bg, http.StatusOK, "")
	e.want(e.do(ctx, http.MethodDelete, "/v1/leases/"+bg.Str("lease_id"), nil), http.StatusOK, "")
	cg := e.acquire(map[string]any{"key": key, "ticket": c.Str("ticket"), "wait_ms": 30000})
	e.want(cg, http.StatusOK, "")
	if cg.Num("token") <= bg.Num("token") {
		t.Fatalf("c's token %d, want above b's %d", cg.Num("token"), bg.Num("token"))
	}
	// A ticket serves one grant.
	e.want(e.acquire(map[string]any{"key": key, "ticket": c.Str("ticket")}), http.StatusNotFound, "ticket_not_found")
	// And it waits for one key.
	d := e.acquire(map[string]any{"key": key, "wait_ms": 10})
	e.want(d, http.StatusAccepted, "")
	e.want(e.acquire(map[string]any{"key": e.Key("other"), "ticket": d.Str("ticket")}), http.StatusBadRequest, "ticket_mismatch")
}

// A ticket not reclaimed within its TTL gives its place up: nothing stays
// queued on the backend.
func TestWait_ticketExpires(t *testing.T) {
	e := newEnv(t, gatewayTicketTTL(200*time.Millisecond))
	key := e.Key("k")
	e.want(e.acquire(map[string]any{"key": key}), http.StatusOK, "")
	b := e.acquire(map[string]any{"key": key, "wait_ms": 10})
	e.want(b, http.StatusAccepted, "")
	e.eventually("the expired ticket's waiter leaves the backend's queue", func() bool { return len(e.Info(key).Waiters) == 0 })
	e.want(e.acquire(map[string]any{"key": key, "ticket": b.Str("ticket")}), http.StatusNotFound, "ticket_not_found")
}

// A long poll returns as soon as the key is granted.
func TestWait_grantedWhileWaiting(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	a := e.acquire(map[string]any{"key": key})
	e.want(a, http.StatusOK, "")
	got := make(chan reply, 1)
	go func() {
		r, _ := e.try(context.Background(), http.MethodPost, "/v1/acquire", map[string]any{"key": key, "wait_ms": 30000})
		got <- r
	}()
	e.eventually("the poll waits on the backend", func() bool { return len(e.Info(key).Waiters) == 1 })
	e.want(e.do(context.Background(), http.MethodDelete, "/v1/leases/"+a.Str("lease_id"), nil), http.StatusOK, "")
	select {
	case r := <-got:
		e.want(r, http.StatusOK, "")
	case <-time.After(waitFor):
		t.Fatal("the poll was not granted")
	}
}

// A client that goes away while waiting leaves nothing queued.
func TestWait_clientGoneLeavesNothing(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	a := e.acquire(map[string]any{"key": key})
	e.want(a, http.StatusOK, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.try(ctx, http.MethodPost, "/v1/acquire", map[string]any{"key": key, "wait_ms": 30000})
		done <- err
	}()
	e.eventually("the poll waits on the backend", func() bool { return len(e.Info(key).Waiters) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("poll: %v, want it cancelled", err)
	}
	e.eventually("the waiter leaves the backend's queue", func() bool { return len(e.Info(key).Waiters) == 0 })
	e.want(e.do(context.Background(), http.MethodDelete, "/v1/leases/"+a.Str("lease_id"), nil), http.StatusOK, "")
	if in := e.Info(key); len(in.Holders) != 0 {
		t.Fatalf("nobody waits, yet the key is held: %+v", in.Holders)
	}
}

// A grant that lands just as the waiting client goes away is released,
// not left held (and renewed by the gateway) with nobody to release it.
// The backend grants; the gateway is held before handing the grant over
// until it has seen the client go.
func TestWait_grantAsClientGoes(t *testing.T) {
	e := newEnv(t)
	key := e.Key("k")
	granted, abandoned, proceed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	testhook.SetGranted(func(k string) {
		if k == key {
			close(granted)
			<-proceed
		}
	})
	testhook.SetAbandoned(func(k string) {
		if k == key {
			close(abandoned)
		}
	})
	t.Cleanup(func() { testhook.SetGranted(nil); testhook.SetAbandoned(nil) })

	a := e.acquire(map[string]any{"key": key})
	e.want(a, http.StatusOK, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// A TTL far beyond the test's wait: only a release frees the key.
		_, err := e.try(ctx, http.MethodPost, "/v1/acquire", map[string]any{"key": key, "wait_ms": 30000, "ttl_ms": 600000})
		done <- err
	}()
	e.eventually("the poll waits on the backend", func() bool { return len(e.Info(key).Waiters) == 1 })
	e.want(e.do(context.Background(), http.MethodDelete, "/v1/leases/"+a.Str("lease_id"), nil), http.StatusOK, "")
	waitChan(t, granted, "the backend's grant")
	cancel()
	waitChan(t, abandoned, "the gateway to see the client go")
	close(proceed)
	<-done
	e.eventually("the orphan grant is released", func() bool {
		in := e.Info(key)
		return len(in.Holders) == 0 && len(in.Waiters) == 0
	})
	e.want(e.acquire(map[string]any{"key": key}), http.StatusOK, "")
}

func waitChan(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(waitFor):
		t.Fatalf("no %s within %v", what, waitFor)
	}
}

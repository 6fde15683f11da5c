package clienttest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockdev/dlock/gateway"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// grant is a Go acquire's reply through the gateway.
type grant struct {
	status int
	token  uint64
	body   map[string]any
	err    error
}

// acquireAsync sends an acquire to the gateway, as a client of another
// language would, and delivers the reply on the channel.
func (e *env) acquireAsync(body map[string]any) <-chan grant {
	got := make(chan grant, 1)
	go func() {
		var g grant
		defer func() { got <- g }()
		j, _ := json.Marshal(body)
		resp, err := e.Srv.Client().Post(e.Srv.URL+"/v1/acquire", "application/json", bytes.NewReader(j))
		if err != nil {
			g.err = err
			return
		}
		defer resp.Body.Close()
		g.status = resp.StatusCode
		if g.err = json.NewDecoder(resp.Body).Decode(&g.body); g.err != nil {
			return
		}
		if s, ok := g.body["token_str"].(string); ok {
			g.token, g.err = strconv.ParseUint(s, 10, 64)
		}
	}()
	return got
}

// await waits for a reply of acquireAsync.
func (e *env) await(got <-chan grant, what string) grant {
	e.T.Helper()
	select {
	case g := <-got:
		if g.err != nil {
			e.T.Fatalf("%s: %v", what, g.err)
		}
		return g
	case <-time.After(waitFor):
		e.T.Fatalf("%s: no reply within %v", what, waitFor)
	}
	return grant{}
}

func (e *env) release(g grant) {
	e.T.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodDelete, e.Srv.URL+"/v1/leases/"+g.body["lease_id"].(string), nil)
	resp, err := e.Srv.Client().Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.T.Fatalf("release: %d", resp.StatusCode)
	}
}

func num(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// holderToken is the token of key's only holder on the backend, 0 if none.
func (e *env) holderToken(key string) uint64 {
	e.T.Helper()
	in := e.Info(key)
	switch len(in.Holders) {
	case 0:
		return 0
	case 1:
		return in.Holders[0].Token
	}
	e.T.Fatalf("%d holders of %s on the backend: %+v", len(in.Holders), key, in.Holders)
	return 0
}

// Acquire, renew and release, a second client refused while the key is
// held, tokens that go up, a replayed release: each through the client
// library, each checked on the backend.
func TestClient_acquireRenewRelease(t *testing.T) { eachClient(t, acquireRenewRelease) }

func acquireRenewRelease(t *testing.T, e *env, d *driver) {
	key := e.Key("k")
	a := d.ok(d.do("acquire a %s 5000 0", key))
	tokA := num(t, a[0])
	if rem := num(t, a[1]); rem == 0 || rem > 5000 {
		t.Fatalf("remaining %d ms, want within the TTL (5000 ms)", rem)
	}
	if got := e.holderToken(key); got != tokA {
		t.Fatalf("backend holder's token %d, want the client's %d", got, tokA)
	}
	d.wantError(d.do("acquire b %s 5000 0", key), "locked")

	r := d.ok(d.do("renew a"))
	if num(t, r[0]) != tokA || num(t, r[1]) == 0 {
		t.Fatalf("renew: %q", r)
	}
	d.ok(d.do("release a"))
	if got := e.holderToken(key); got != 0 {
		t.Fatalf("backend holder %d after the release", got)
	}
	d.wantError(d.do("release a"), "lease_released")
	if v := d.ok(d.do("valid a")); v[0] != "false" {
		t.Fatalf("valid after release: %q", v)
	}

	b := d.ok(d.do("acquire b %s 5000 0", key))
	if tokB := num(t, b[0]); tokB <= tokA {
		t.Fatalf("second grant's token %d, want above %d", tokB, tokA)
	}
	d.ok(d.do("release b"))
}

// A wait polls again with its ticket until granted, keeping its FIFO place
// however many polls it takes; a wait that ends ungranted gives its place
// up.
func TestClient_waitKeepsPlace(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			// Each poll waits at most 10 ms: every wait below spans polls.
			e := newEnv(t, gateway.MaxWait(10*time.Millisecond))
			d := startDriver(t, lang, e.Srv.URL)
			key := e.Key("k")
			h := e.await(e.acquireAsync(map[string]any{"key": key}), "holder")
			d.send("acquire w1 %s 10000 -1", key)
			e.eventually("w1 waits on the backend", func() bool { return len(e.Info(key).Waiters) == 1 })
			d.send("acquire w2 %s 10000 -1", key)
			e.eventually("w2 waits behind w1", func() bool { return len(e.Info(key).Waiters) == 2 })
			e.release(h)
			w1 := num(t, d.ok(d.next("w1"))[0])
			if got := e.holderToken(key); got != w1 {
				t.Fatalf("backend holder %d, want w1's %d (w1 queued first)", got, w1)
			}
			if in := e.Info(key); len(in.Waiters) != 1 {
				t.Fatalf("waiters after w1's grant: %+v, want w2", in.Waiters)
			}
			d.ok(d.do("release w1"))
			if w2 := num(t, d.ok(d.next("w2"))[0]); w2 <= w1 {
				t.Fatalf("w2's token %d, want above w1's %d", w2, w1)
			}
			d.ok(d.do("release w2"))

			other := e.Key("other")
			d.ok(d.do("acquire x %s 10000 0", other))
			d.wantError(d.do("acquire y %s 10000 100", other), "wait_timeout")
			e.eventually("the timed-out waiter leaves the backend's queue", func() bool { return len(e.Info(other).Waiters) == 0 })
		})
	}
}

// A streaming hold keeps the lease while the client's process lives: a
// client killed with SIGKILL releases it, and the next waiter is granted
// long before the TTL (60 s) would have.
func TestClient_holdReleasedWhenKilled(t *testing.T) { eachClient(t, holdReleasedWhenKilled) }

func holdReleasedWhenKilled(t *testing.T, e *env, d *driver) {
	key := e.Key("k")
	tok := num(t, d.ok(d.do("hold h %s 60000", key))[0])
	if got := e.holderToken(key); got != tok {
		t.Fatalf("backend holder %d, want the hold's %d", got, tok)
	}
	next := e.acquireAsync(map[string]any{"key": key, "wait_ms": 30000})
	e.eventually("the next client waits on the backend", func() bool { return len(e.Info(key).Waiters) == 1 })
	d.signal(syscall.SIGKILL)
	g := e.await(next, "the next waiter after the SIGKILL")
	if g.status != http.StatusOK || g.token <= tok {
		t.Fatalf("next waiter: %d %v, want granted with a token above %d", g.status, g.body, tok)
	}
	e.release(g)
}

// Closing a hold releases the lease; a hold whose lease the backend ends
// reports it lost.
func TestClient_holdClosedAndLost(t *testing.T) {
	eachClient(t, func(t *testing.T, e *env, d *driver) {
		key := e.Key("k")
		d.ok(d.do("hold h %s 60000", key))
		d.ok(d.do("unhold h"))
		e.eventually("the closed hold's lease is released on the backend", func() bool { return e.holderToken(key) == 0 })

		lost := e.Key("lost")
		d.ok(d.do("hold g %s 300", lost))
		e.deleteKeys(lost)
		r := d.next("g")
		if len(r) != 3 || r[0] != "lost" || r[1] != "lease_lost" || r[2] != d.errorClass("lease_lost") {
			t.Fatalf("%q, want lost lease_lost", r)
		}
		// The events, in order, to the end of the stream.
		kinds := strings.Split(d.ok(d.do("events g"))[0], ",")
		if kinds[0] != "granted" || kinds[len(kinds)-1] != "lost" {
			t.Fatalf("events %q, want granted, keep-alives, lost", kinds)
		}
		for _, k := range kinds[1 : len(kinds)-1] {
			if k != "keepalive" {
				t.Fatalf("events %q, want granted, keep-alives, lost", kinds)
			}
		}
	})
}

// A client that stops renewing loses its lease within its TTL: the next
// waiter is granted, and the client library reports the lease ended.
func TestClient_notRenewedExpires(t *testing.T) {
	eachClient(t, func(t *testing.T, e *env, d *driver) {
		key := e.Key("k")
		tok := num(t, d.ok(d.do("acquire a %s 300 0", key))[0])
		g := e.await(e.acquireAsync(map[string]any{"key": key, "wait_ms": 30000}), "the next waiter")
		if g.status != http.StatusOK || g.token <= tok {
			t.Fatalf("next waiter: %d %v, want granted with a token above %d", g.status, g.body, tok)
		}
		// The gateway gave the lease up at its deadline, which is never
		// earlier than the client's own.
		if v := d.ok(d.do("valid a")); v[0] != "false" {
			t.Fatalf("valid %q after the gateway gave the lease up", v)
		}
		d.wantError(d.do("renew a"), "lease_expired")
		e.release(g)
	})
}

// client.lock renews in the background, so the lease outlives its TTL; a
// client paused (SIGSTOP) past the TTL loses it, the next waiter is granted,
// and once thawed the client reports the lease lost.
func TestClient_lockRenewsUntilPaused(t *testing.T) {
	eachClient(t, func(t *testing.T, e *env, d *driver) {
		key := e.Key("k")
		tok := num(t, d.ok(d.do("lock l %s 2000", key))[0])
		// Two TTLs: renewals (every TTL/3) keep the lease.
		w := e.await(e.acquireAsync(map[string]any{"key": key, "wait_ms": 4000}), "a wait of two TTLs")
		if w.status != http.StatusAccepted {
			t.Fatalf("a wait of two TTLs: %d %v, want 202 (the lock is renewed)", w.status, w.body)
		}
		if got := e.holderToken(key); got != tok {
			t.Fatalf("backend holder %d, want the lock's %d", got, tok)
		}
		d.signal(syscall.SIGSTOP)
		g := e.await(e.acquireAsync(map[string]any{"key": key, "wait_ms": 30000, "ticket": w.body["ticket"]}), "the waiter after the pause")
		d.signal(syscall.SIGCONT)
		if g.status != http.StatusOK || g.token <= tok {
			t.Fatalf("waiter: %d %v, want granted with a token above %d", g.status, g.body, tok)
		}
		r := d.next("l")
		if len(r) != 3 || r[0] != "lost" || (r[1] != "lease_expired" && r[1] != "deadline_passed") {
			t.Fatalf("%q, want lost lease_expired (or deadline_passed)", r)
		}
		// Leaving the lock says so too: the work may have overlapped.
		if u := d.do("unlock l"); len(u) < 2 || u[0] != "error" || u[1] != r[1] {
			t.Fatalf("unlock: %q, want error %s", u, r[1])
		}
		e.release(g)
	})
}

// The same clients in front of etcd: grants and tokens, and a hold
// released when its process is killed.
func TestClient_etcd(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			e := newEnvOn(t, testserver.SharedEtcd(t).URL())
			d := startDriver(t, lang, e.Srv.URL)
			acquireRenewRelease(t, e, d)
			holdReleasedWhenKilled(t, e, d)
		})
	}
}

// The Java client's JSON reader is strict: what RFC 8259 refuses, it
// refuses (clients/java/test/dev/dlock/gateway/JsonTest.java).
func TestJava_json(t *testing.T) {
	out, err := clientCommand(t, "java", "dev.dlock.gateway.JsonTest").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("JsonTest: %v\n%s", err, out)
	}
}

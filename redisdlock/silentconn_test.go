package redisdlock_test

import (
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/leasewait"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// TestRenew_silentConnection_retriedOnAnother: every connection the Client
// has goes silent (no reply, no reset, as behind a NAT that lost their
// state) while new connections work. The renewal in flight on a silent
// connection is given up on well inside the lease and sent again on a new
// connection, so the lease outlives the deadline it had when the silence
// began.
func TestRenew_silentConnection_retriedOnAnother(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	proxy := faultproxy.Start(t, srv.Addr(), nil)
	c := newTestClient(t, ctx, proxy.Addr(), nil)
	const ttl = time.Second
	l, err := c.Lock(ctx, "silent", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	dialed := proxy.Accepted()
	proxy.Stall()
	defer proxy.Restore()
	was := l.Deadline()

	// Renewed on a new connection: the deadline moves past the one the
	// lease had when its connections went silent.
	if err := leasewait.RenewedPast(ctx, l, was.Add(ttl/2)); err != nil {
		t.Fatalf("%v, while new connections worked", err)
	}
	if proxy.Accepted() == dialed {
		t.Fatal("renewed with no new connection, although every old one was silent")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRenew_slowReplyWithoutScript: a server that has not got the renewal
// script yet answers the first renewal's EVALSHA with NOSCRIPT, and the
// script is sent again: two round trips. With replies 200 ms slow and a
// 1 s lease, those two fit in what is left of the lease but not in half of
// it, the budget of a try on a connection that may be silent. The
// connection answered, so the second send is not a retry on a silent
// connection: the renewal must be counted and the lease kept.
func TestRenew_slowReplyWithoutScript(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	proxy := faultproxy.Start(t, srv.Addr(), nil)
	c := newTestClient(t, ctx, proxy.Addr(), nil)
	const ttl = time.Second
	// A connection, and the grant's script cached, before the replies
	// slow down: only the renewal's script is missing.
	warm, err := c.Lock(ctx, "warm", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(0, 200*time.Millisecond)
	l, err := c.Lock(ctx, "noscript", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := leasewait.RenewedPast(ctx, l, l.Deadline()); err != nil {
		t.Fatalf("%v, on a slow but working connection", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

package redisdlock_test

import (
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
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
	proxy, err := faultproxy.New(srv.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
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
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !l.Deadline().After(was.Add(ttl / 2)) {
		select {
		case <-l.Done():
			t.Fatalf("lease lost while new connections worked: %v", l.Err())
		case <-ctx.Done():
			t.Fatal("lease neither renewed nor lost (watchdog)")
		case <-tick.C:
		}
	}
	if proxy.Accepted() == dialed {
		t.Fatal("renewed with no new connection, although every old one was silent")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

package zkdlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/leasewait"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// TestRenew_silentConnection_reconnectsInTime: the Client's connection goes
// silent (no reply, no reset, as behind a NAT that lost its state) while
// new connections work. The renewal in flight on it is given up on well
// inside the lease, the connection is dropped, and the renewal is sent
// again on a new connection of the same session, which the server still
// keeps: the lease outlives the deadline it had when the silence began.
//
// Both ways a Client counts a lease: from its renewals' own requests (a
// server found standalone), and from what the leader is known to have heard
// (an ensemble's rule, tick_time given; a third of the session timeout
// less, which go-zookeeper's own timeout on a silent connection, two
// thirds of the session timeout, overruns).
func TestRenew_silentConnection_reconnectsInTime(t *testing.T) {
	for _, tc := range []struct{ name, params string }{
		{"standalone", ""},
		{"ensembleRule", "&tick_time=500ms"},
	} {
		t.Run(tc.name, func(t *testing.T) { silentConnection(t, tc.params) })
	}
}

func silentConnection(t *testing.T, params string) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	proxy := faultproxy.Start(t, srv.Addr(), nil)
	const timeout = 2 * time.Second
	c, err := dlock.Open(ctx, fmt.Sprintf("zk://%s%s?session_timeout=%v%s", proxy.Addr(), testRoot(t), timeout, params))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.Lock(ctx, "silent")
	if err != nil {
		t.Fatal(err)
	}
	// The silence begins just after a renewal answered: the lease then
	// has the least time left that a healthy connection leaves it.
	if err := leasewait.RenewedPast(ctx, l, l.Deadline()); err != nil {
		t.Fatalf("%v, before the silence", err)
	}
	dialed := proxy.Accepted()
	proxy.Stall()
	defer proxy.Restore()
	was := l.Deadline()

	if err := leasewait.RenewedPast(ctx, l, was.Add(l.TTL()/2)); err != nil {
		t.Fatalf("%v, while new connections worked", err)
	}
	t.Logf("renewed; the old deadline was %v away", time.Until(was))
	if proxy.Accepted() == dialed {
		t.Fatal("renewed with no new connection, although the old one was silent")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

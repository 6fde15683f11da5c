package zkdlock

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// TestOpen_zks_countsConnections: over TLS the driver still reads the
// session handshake (the negotiated timeout, the lease length) and counts
// the connections that got a session, which renewals rely on (connGen): a
// connection broken and dialed again over TLS counts once more, and a lock
// taken before renews on it.
func TestOpen_zks_countsConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	z := testserver.StartZooKeeperTLS(t, false)
	proxy := dlocktest.NewProxy(t, z.SecureAddr())
	u, err := url.Parse("zks://" + proxy.Addr() + "/test/tls?session_timeout=90s&cacert=" + url.QueryEscape(z.TLS().CAFile))
	if err != nil {
		t.Fatal(err)
	}
	dd, err := openURL(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	d := dd.(*zkDriver)
	defer d.Close()
	// The test server grants at most 60 s (maxSessionTimeout).
	if got := d.timeout(); got != 60*time.Second {
		t.Fatalf("session timeout over TLS: %v, want the negotiated 60s (the handshake was not read)", got)
	}
	conns := d.connGen()
	if conns == 0 {
		t.Fatal("the TLS connection that got a session was not counted")
	}
	g, err := d.Acquire(ctx, &driver.AcquireRequest{Key: "k", Owner: "0123456789abcdef0123456789abcdef", TTL: d.timeout(), Wait: true, Kind: driver.KindLock, Limit: 1, Mode: driver.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Reset() // the connection breaks; go-zookeeper dials again, over TLS
	errs := d.RenewBatch(ctx, []driver.Grant{g})
	for errs != nil && errors.Is(errs[0], driver.ErrUnavailable) && ctx.Err() == nil {
		errs = d.RenewBatch(ctx, []driver.Grant{g})
	}
	if errs != nil && errs[0] != nil {
		t.Fatalf("renewal after the reconnect over TLS: %v", errs[0])
	}
	if got := d.connGen(); got <= conns {
		t.Fatalf("connections counted: %d after a reconnect over TLS, %d before", got, conns)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

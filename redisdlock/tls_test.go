package redisdlock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// tlsQuery is the query of a TLS URL: the CA file and, if c is not nil,
// its certificate as the client's.
func tlsQuery(caFile string, c *testserver.RedisTLS) string {
	q := url.Values{"cacert": {caFile}}
	if c != nil {
		q.Set("cert", c.CertFile)
		q.Set("key", c.KeyFile)
	}
	return "?" + q.Encode()
}

// lockUnlockTLS opens rawURL, takes and releases a lock, and closes.
func lockUnlockTLS(t *testing.T, ctx context.Context, rawURL string) {
	t.Helper()
	c, err := dlock.Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("Open over TLS: %v", err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "tls-key")
	if err != nil {
		t.Fatalf("Lock over TLS: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock over TLS: %v", err)
	}
}

// openRefused checks that Open of rawURL fails with ErrUnavailable and an
// error saying why and pointing at the TLS parameters.
func openRefused(t *testing.T, ctx context.Context, rawURL, why string) {
	t.Helper()
	c, err := dlock.Open(ctx, rawURL)
	if err == nil {
		_ = c.Close()
	}
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "check the URL's cacert") {
		t.Errorf("Open(%s): err = %v, want ErrUnavailable saying %q and naming the TLS parameters", rawURL, err, why)
	}
}

// Every topology speaks TLS by URL: the Sentinel, the data nodes and the
// cluster nodes, each requiring a client certificate.
func TestOpen_TLS(t *testing.T) {
	for _, topo := range []struct {
		name  string
		start func(t *testing.T, c *testserver.RedisTLS) string // the URL without a query
	}{
		{"single", func(t *testing.T, c *testserver.RedisTLS) string {
			return testserver.StartRedisTLS(t, c).URL()
		}},
		{"sentinel", func(t *testing.T, c *testserver.RedisTLS) string {
			_, sentinel := testserver.StartRedisSentinelTLS(t, c)
			return "rediss+sentinel://" + sentinel + "/mymaster"
		}},
		{"cluster", func(t *testing.T, c *testserver.RedisTLS) string {
			return "rediss+cluster://" + strings.Join(testserver.StartRedisClusterTLS(t, 3, c), ",")
		}},
	} {
		t.Run(topo.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := testserver.NewRedisTLS(t)
			c.RequireClientCert = true
			wrong := testserver.NewRedisTLS(t)
			base := topo.start(t, c)

			lockUnlockTLS(t, ctx, base+tlsQuery(c.CAFile, c))
			openRefused(t, ctx, base+tlsQuery(wrong.CAFile, c), "certificate signed by unknown authority")
			openRefused(t, ctx, base+tlsQuery(c.CAFile, nil), "certificate required")
		})
	}
}

// A server that does not ask for client certificates needs only the CA;
// server_name is the name its certificate is checked against; go-redis'
// skip_verify still turns the check off.
func TestOpen_TLSServerName(t *testing.T) {
	ctx := testCtx(t)
	c := testserver.NewRedisTLS(t)
	base := testserver.StartRedisTLS(t, c).URL()
	lockUnlockTLS(t, ctx, base+tlsQuery(c.CAFile, nil))
	lockUnlockTLS(t, ctx, base+tlsQuery(c.CAFile, nil)+"&server_name=localhost")
	openRefused(t, ctx, base+tlsQuery(c.CAFile, nil)+"&server_name=db.example", "db.example")
	lockUnlockTLS(t, ctx, base+"?skip_verify=true")
}

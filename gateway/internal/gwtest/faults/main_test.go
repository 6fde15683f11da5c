package faults

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	_ "github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/gateway"
	"github.com/dlockdev/dlock/internal/testing/gwenv"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	_ "github.com/dlockdev/dlock/redisdlock"
	_ "github.com/dlockdev/dlock/zkdlock"
)

// redisAddr is the Redis the tests share, each on keys of its own.
var redisAddr string

// The test binary is also the gateway process the kill test SIGKILLs
// (gatewayProcess): started again by testproc, it runs that instead.
func TestMain(m *testing.M) {
	testproc.RunChild(map[string]testproc.Role{"gateway": gatewayProcess})
	gwenv.Main(m, "faults", &redisAddr, nil)
}

// waitFor bounds every request of the tests.
const waitFor = 20 * time.Second

// backends are the servers every test runs on.
var backends = []struct {
	name string
	url  func(t *testing.T) string
	// portable: the gateways' explicit leases are served by any
	// instance sharing their LeaseKey (etcd with a lease per grant).
	portable bool
}{
	{"redis", func(*testing.T) string { return "redis://" + redisAddr + "/0" }, true},
	{"etcd", func(t *testing.T) string { return testserver.SharedEtcd(t).URL() + "?lease_per_grant=true" }, true},
	{"zk", func(t *testing.T) string { return "zk://" + testserver.SharedZooKeeper(t).Addr() }, false},
}

// newLeaseKey returns a LeaseKey for gateways that share leases.
func newLeaseKey() []byte {
	k := make([]byte, gateway.MinLeaseKeyLen)
	_, _ = rand.Read(k)
	return k
}

var keySeq atomic.Int64

// key returns a key of the test's own.
func key(t *testing.T, name string) string {
	return fmt.Sprintf("gw/%s/%d/%s", t.Name(), keySeq.Add(1), name)
}

// serveGateway serves a gateway over a Client of the backend at url on a
// loopback port, until the test ends; it returns the gateway's base URL.
// Gateways given one LeaseKey serve each other's leases where the backend
// keeps them (backend.portable).
func serveGateway(t *testing.T, url string, opts ...gateway.Option) string {
	t.Helper()
	c, err := dlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := gw.Close(context.Background()); err != nil {
			t.Errorf("gateway Close: %v", err)
		}
		_ = srv.Close()
		c.Close()
	})
	return "http://" + ln.Addr().String()
}

// reply is a decoded JSON reply of the gateway.
type reply = gwenv.Reply

// call sends a request (body marshalled as JSON, nil for none) to the
// gateway at base, on a connection of its own, and decodes the reply.
func call(ctx context.Context, method, base, path string, body any) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*waitFor)
	defer cancel()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	return gwenv.Call(ctx, &http.Client{Transport: tr}, http.Header{"Content-Type": {"application/json"}}, method, base+path, body)
}

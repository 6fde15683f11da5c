package dlocktest

import (
	"testing"

	"github.com/dlockdev/dlock/internal/testing/faultproxy"
)

// Proxy is a TCP proxy on a loopback port that a harness puts between one
// client and the server, so that the suite can cut that client off without
// touching anybody else. It implements Link.
type Proxy struct {
	p *faultproxy.Proxy
}

// NewProxy starts a proxy to target (host:port) and stops it when the test
// ends. Addr is where clients should connect.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := faultproxy.New(target, nil)
	if err != nil {
		t.Fatalf("dlocktest: proxy to %s: %v", target, err)
	}
	t.Cleanup(p.Close)
	return &Proxy{p: p}
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.p.Addr() }

// Blackhole stops all traffic through the proxy in both directions, without
// closing connections: the client sees a silent network, as in a partition
// or when the server is frozen. Data already sent waits in the proxy.
func (p *Proxy) Blackhole() { p.p.Blackhole() }

// Restore lets traffic flow again after Blackhole; held data is delivered.
func (p *Proxy) Restore() { p.p.Restore() }

// Reset closes every connection through the proxy, as a server crash or a
// middlebox reset would. New connections are accepted as usual.
func (p *Proxy) Reset() { p.p.Reset() }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() { p.p.Close() }

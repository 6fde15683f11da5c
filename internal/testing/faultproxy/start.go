package faultproxy

import "testing"

// Start is New for a test: it fails the test if the proxy cannot start, and
// closes the proxy when the test ends.
func Start(t testing.TB, target string, opts *Options) *Proxy {
	t.Helper()
	p, err := New(target, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

package main

import (
	"net/url"
	"path/filepath"
	"testing"

	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// TestScripts_zks runs testdata/zks/*.txtar against a ZooKeeper's secure
// client port: DLOCK_BACKEND is a zks:// URL with the server's CA.
func TestScripts_zks(t *testing.T) {
	z := testserver.StartZooKeeperTLS(t, false)
	path := "/dlock-cli?" + url.Values{"cacert": {z.TLS().CAFile}}.Encode()
	runScripts(t, &backend{scheme: "zks", addr: z.SecureAddr(), url: "zks://" + z.SecureAddr() + path, path: path}, filepath.Join("testdata", "zks"))
}

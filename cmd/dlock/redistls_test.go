package main

import (
	"path/filepath"
	"testing"

	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestScripts_redisTLS runs testdata/redistls/*.txtar against a redis-server
// that speaks only TLS and requires a client certificate: $TLS_CA,
// $TLS_CERT and $TLS_KEY are its CA and a client certificate, $WRONG_CA a
// CA that did not sign it.
func TestScripts_redisTLS(t *testing.T) {
	c := testserver.NewRedisTLS(t)
	c.RequireClientCert = true
	wrong := testserver.NewRedisTLS(t)
	r := testserver.StartRedisTLS(t, c)
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "redistls"),
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("BACKEND_ADDR", r.Addr())
			env.Setenv("TLS_CA", c.CAFile)
			env.Setenv("TLS_CERT", c.CertFile)
			env.Setenv("TLS_KEY", c.KeyFile)
			env.Setenv("WRONG_CA", wrong.CAFile)
			return nil
		},
		Cmds: scriptCommands(t),
	})
}

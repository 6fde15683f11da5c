package storetest_test

import (
	"testing"

	"github.com/dlockdev/dlock/internal/testing/leakcheck"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// TestMain runs a child's role when the process is one (the SIGSTOP
// proofs), else the tests; then it stops the shared PostgreSQL and MariaDB servers and
// checks that no client, lease or connection pool was left running.
func TestMain(m *testing.M) {
	testproc.RunChild(roles)
	code := m.Run()
	testserver.StopSharedPostgres()
	testserver.StopSharedMariaDB()
	leakcheck.Exit(code)
}

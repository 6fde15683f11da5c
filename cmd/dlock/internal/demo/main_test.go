package demo

import (
	"os"
	"testing"

	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// TestMain stops the PostgreSQL server that the tests of the postgres store
// share (testserver.SharedPostgres), if one was started.
func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopSharedPostgres()
	os.Exit(code)
}

package zkdlock_test

import (
	"testing"

	"github.com/dlockdev/dlock/internal/testing/leakcheck"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// TestMain stops the package's ZooKeeper server after the tests, then checks
// that every client, lease, waiter and janitor stopped its goroutines. In a
// child process of the fencing proofs it runs the child's role instead
// (childRoles, fence_proof_test.go).
func TestMain(m *testing.M) {
	testproc.RunChild(childRoles)
	code := m.Run()
	testserver.StopSharedZooKeeper()
	leakcheck.Exit(code)
}

package dlockotel_test

import (
	"testing"

	"github.com/dlockdev/dlock/internal/testing/leakcheck"
)

// TestMain fails the run when a test leaves a goroutine behind: a lease's
// renewer, a Client's, or an SDK processor's.
func TestMain(m *testing.M) {
	code := m.Run()
	leakcheck.Exit(code)
}

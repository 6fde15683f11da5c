package dlockotel_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/dlockdev/dlock/internal/testing/leakcheck"
)

// TestMain fails the run when a test leaves a goroutine behind: a lease's
// renewer, a Client's, or an SDK processor's.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := leakcheck.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutine leak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

package etcddlock_test

import (
	"testing"

	"github.com/dlockdev/dlock/internal/testing/leakcheck"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// Every client, lease and waiter must stop its goroutines when closed,
// released or cancelled. The shared etcd process is stopped first: the
// goroutines that tend it are not ours to check. A child process of the
// fencing proofs (internal/testing/testproc) runs its role instead, and exits.
func TestMain(m *testing.M) {
	testproc.RunChild(fenceRoles)
	code := m.Run()
	testserver.StopSharedEtcd()
	leakcheck.Exit(code, leakIgnored...)
}

// leakIgnored are goroutines started once per process by libraries etcd's
// client links in.
var leakIgnored = []string{"go.opencensus.io/stats/view.(*worker).start"}
